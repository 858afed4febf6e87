"""One Qwen-VL LLM.generate run on the emulated NPU in a fresh process, printed as JSON.

The batch of test_qwen_vl_generate.py (chat prompts with one image, two images of
different sizes, none, one again), bf16, block size 128, graphs in the plan's default
mode (no cudagraph_mode given, no enforce_eager): the language model's decode captured,
the vision tower eager. Two rounds (the second with the multimodal caches warm).

Run as: python vision_run.py MODEL_DIR (the test starts it with the emulator's child_env).
"""

from __future__ import annotations

import json
import os
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
    reset_counters()
    rounds = [llm.generate(prompts, params, use_tqdm=False) for _ in range(2)]
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    encoder = [m for m in runner.model.modules() if type(m).__name__.endswith("EncoderAttention")]
    rope = [m for m in runner.model.modules() if type(m).__name__.endswith("MRotaryEmbedding")]
    attention = torch_npu.calls_of("npu_fused_infer_attention_score")
    config = llm.llm_engine.vllm_config.compilation_config
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
    }), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
