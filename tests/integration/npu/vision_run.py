"""One Qwen-VL LLM.generate run on the emulated NPU in a fresh process, printed as JSON.

The batch of test_qwen_vl_generate.py (chat prompts with one image, two images of
different sizes, none, one again), bf16, block size 128, graphs in the plan's default
mode (no cudagraph_mode given, no enforce_eager): the language model's decode captured,
the vision tower eager. Two rounds (the second with the multimodal caches warm). Then
what the worker allocated for the tower (its profiling batch's outputs and peak, the
encoder cache) and for the KV cache, for the test to hold the doctor's numbers against.

Run as: python vision_run.py MODEL_DIR (the test starts it with the emulator's child_env).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

_TESTS = Path(__file__).resolve().parents[2]
MAX_NEW = 8
IMAGE_SIZES = ((64, 96), (100, 60), (80, 80))
CASES = [((0,), "def f(x):"), ((0, 1), "import os\n"), ((), "class A:"), ((2,), "for i in")]
CAPTURE_SIZES = [1, 2, 4]


def images() -> list[Any]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    return [
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in IMAGE_SIZES
    ]


def chats(model: str) -> list[tuple[str, list[int]]]:
    """Per case: the chat prompt and the image indices it takes."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(model)
    out = []
    for picks, text in CASES:
        content = [*({"type": "image"} for _ in picks), {"type": "text", "text": text}]
        chat = processor.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True
        )
        out.append((chat, list(picks)))
    return out


def main(model: str) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process
    os.environ["VLLM_ASCEND_DEVICE"] = "npu"
    sys.path.insert(0, str(_TESTS))
    from support.torch_npu_emulator.activate import activate

    torch_npu = activate()
    from vllm import LLM, SamplingParams
    from vllm.compilation.counter import compilation_counter

    from support.emulated_npu_device import counters, reset_counters

    llm = LLM(
        model=model, dtype="bfloat16", max_model_len=512, max_num_seqs=4,
        max_num_batched_tokens=64,  # prompts with images prefill in chunks
        block_size=128,  # the NPU op's paged prefill needs a multiple of 128
        kv_cache_memory_bytes=32 << 20, enable_prefix_caching=True, seed=0,
        limit_mm_per_prompt={"image": 2, "video": 0},
        compilation_config={"cudagraph_capture_sizes": CAPTURE_SIZES},
    )
    pictures = images()
    prompts = [
        {"prompt": chat, **({"multi_modal_data": {"image": [pictures[i] for i in picks]}}
                            if picks else {})}
        for chat, picks in chats(model)
    ]
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    # Qwen3-VL's DeepStack: the tower's mergers of intermediate layers (their features go
    # into the language model's first layers); counted per call.
    deepstack = [0]
    for name, module in runner.model.named_modules():
        if re.search(r"deepstack_merger_list\.\d+$", name):
            module.register_forward_hook(lambda *_: deepstack.__setitem__(0, deepstack[0] + 1))
    reset_counters()
    rounds = [llm.generate(prompts, params, use_tqdm=False) for _ in range(2)]
    merged = deepstack[0]
    encoder = [m for m in runner.model.modules() if type(m).__name__.endswith("EncoderAttention")]
    rope = [m for m in runner.model.modules() if type(m).__name__.endswith("MRotaryEmbedding")]
    attention = torch_npu.calls_of("npu_fused_infer_attention_score")
    config = llm.llm_engine.vllm_config.compilation_config
    memory = _allocated(llm, runner, torch_npu)
    print("RESULT " + json.dumps({
        "prompt_ids": [o.prompt_token_ids for o in rounds[0]],
        "runs": [[list(o.outputs[0].token_ids) for o in out] for out in rounds],
        "graph_mode": config.cudagraph_mode.name,
        "encoder_graphs": bool(config.cudagraph_mm_encoder),
        "captured": compilation_counter.num_cudagraph_captured,
        "counters": counters(),
        "classes": sorted({type(m).__name__ for m in (*encoder, *rope)}),
        "ops": type(encoder[0].device_ops).__name__,
        "devices": sorted({p.device.type for p in runner.model.parameters()}),
        # The tower's calls: without a cache (no block table), BSND, their batch lengths.
        "encoder_calls": sorted({
            (b["input_layout"], tuple(b["query"].shape[2:]), tuple(b["actual_seq_lengths"]))
            for b in attention if b["block_table"] is None}),
        "paged_calls": sum(b["block_table"] is not None for b in attention),
        "mrope_calls": sorted({
            (tuple(b["positions"].shape[:1]), tuple(b["mrope_section"] or ()))
            for b in torch_npu.calls_of("npu_mrope")}),
        "rotary_mul_calls": len(torch_npu.calls_of("npu_rotary_mul")),
        "deepstack_calls": merged,
        "memory": memory,
    }), flush=True)


def _allocated(llm: Any, runner: Any, torch_npu: Any) -> dict[str, Any]:
    """The worker's encoder budget, its scheduler's encoder cache, the tower's profiling
    batch (outputs, patches, the device's peak above what it held before) and the KV."""
    import torch

    budget = runner.mm_budget
    modality = next(m for m, n in budget.mm_max_toks_per_item.items() if n)
    items = budget.mm_max_items_per_batch[modality]
    dummy = runner._get_mm_dummy_batch(modality, items)
    torch_npu.npu.synchronize()
    before = torch_npu.npu.memory_allocated()
    torch_npu.npu.reset_peak_memory_stats()
    with torch.no_grad():
        outs = runner.model.embed_multimodal(**dummy)
    torch_npu.npu.synchronize()
    peak = torch_npu.npu.max_memory_allocated() - before
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    kv = runner.kv_cache_config
    return {
        "max_tokens_per_item": dict(budget.mm_max_toks_per_item),
        "cache_tokens": budget.encoder_cache_size,
        "compute_tokens": budget.encoder_compute_budget,
        "scheduler_cache_tokens": scheduler.encoder_cache_manager.cache_size,
        "profile_modality": modality,
        "profile_items": items,
        "output_tokens": [int(o.shape[0]) for o in outs],
        "bytes_per_token": outs[0].element_size() * outs[0].shape[1],
        "patches": int(dummy["pixel_values"].shape[0]),
        "patch_values": int(dummy["pixel_values"].shape[1]),
        "vision_hidden": int(runner.model.config.vision_config.hidden_size),
        "tower_peak_bytes": int(peak),
        "kv_held": sum(t.size for t in kv.kv_cache_tensors),
        "kv_slots": kv.num_blocks * runner.cache_config.block_size,
    }


if __name__ == "__main__":
    main(sys.argv[1])
