"""One LoRA LLM.generate run (a mixed batch: adapter A, adapter B and none per prompt) in
a fresh process, printed as JSON.

Run as: python lora_run.py {host,npu} BASE ADAPTER_A ADAPTER_B [graphs]
`npu`: the emulated torch_npu and `npu` device (see generate_run.py); bf16 on both.
`graphs`: no enforce_eager; the plan's graph mode, capturing CAPTURE_SIZES.
The runner is the environment's (VLLM_USE_V2_MODEL_RUNNER=1 on the NPU: V2); the result
says which the worker built and, on V2, the active-adapter counts its FULL graphs were
captured for and the steps sampled from a FULL graph's recorded logits.
"""

from __future__ import annotations

import json
import os
import sys

from generate_run import CAPTURE_SIZES, emulate_npu, prompts

LENGTHS = (5, 150, 40, 1)  # 150 > max_num_batched_tokens: chunked prefill
MAX_NEW = 8


def describe(worker: object) -> dict[str, object]:
    """On the worker: the punica wrapper, its LoRA ops and where the adapters' weights live."""
    runner = worker.model_runner  # type: ignore[attr-defined]
    manager = runner.lora_manager._adapter_manager
    wrapper = next(iter(manager.punica_wrapper_mapping.values()))
    stacked = [
        t
        for module in manager.modules.values()
        for t in (*getattr(module, "lora_a_stacked", ()), *getattr(module, "lora_b_stacked", ()))
    ]
    devices = {str(t.device.type) for t in stacked}
    graphs = getattr(getattr(runner, "cudagraph_manager", None), "graphs", None) or {}
    return {
        "runner": type(runner).__name__,
        "mro": [f"{c.__module__}.{c.__qualname__}" for c in type(runner).__mro__],
        # V2: the active-adapter counts it captures graphs for, and its FULL graphs' counts.
        "lora_capture_cases": getattr(runner, "lora_capture_cases", None),
        "full_graph_lora_counts": sorted({d.num_active_loras for d in graphs}),
        "graph_logits_steps": getattr(runner, "graph_logits_steps", None),
        "tail_steps": getattr(getattr(runner, "_tail", None), "served_steps", None),
        "wrapper": type(wrapper).__name__,
        "lora_ops": type(wrapper.lora_ops).__name__,
        "lora_weight_devices": sorted(devices),
        "lora_bytes": sum(t.numel() * t.element_size() for t in stacked),
        "lora_modules": sorted({name.rsplit(".", 1)[-1] for name in manager.modules}),
    }


def main(device: str, base: str, adapter_a: str, adapter_b: str, graphs: str = "") -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_ASCEND_DEVICE"] = "cpu" if device == "host" else "npu"
    if device == "npu":
        emulate_npu()
    from vllm import LLM, SamplingParams, TokensPrompt
    from vllm.compilation.counter import compilation_counter
    from vllm.lora.request import LoRARequest
    from vllm.platforms import current_platform

    graph_args: dict[str, object] = (
        {"compilation_config": {"cudagraph_capture_sizes": CAPTURE_SIZES}} if graphs else {}
    )
    llm = LLM(
        model=base,
        dtype="bfloat16",
        enforce_eager=not graphs,
        **graph_args,  # type: ignore[arg-type]
        enable_lora=True,
        max_loras=2,
        max_lora_rank=8,
        max_model_len=512,
        block_size=128,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        kv_cache_memory_bytes=32 << 20,
        seed=0,
    )
    requests = [None, LoRARequest("lora-a", 1, adapter_a), LoRARequest("lora-b", 2, adapter_b)]
    batch = [(r, p) for p in prompts(3, LENGTHS) for r in requests]
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    outs = llm.generate(
        [TokensPrompt(prompt_token_ids=p) for _, p in batch],
        params,
        lora_request=[r for r, _ in batch],
        use_tqdm=False,
    )
    compilation = llm.llm_engine.vllm_config.compilation_config
    print("RESULT " + json.dumps({
        "platform": type(current_platform).__name__,
        "engine_v2": bool(llm.llm_engine.vllm_config.use_v2_model_runner),
        "ids": [list(o.outputs[0].token_ids) for o in outs],
        "adapters": [r.lora_name if r else None for r, _ in batch],
        "prompts": [p for _, p in batch],
        "graph_mode": str(compilation.cudagraph_mode.name),
        "captured": compilation_counter.num_cudagraph_captured,
        **llm.collective_rpc(describe)[0],
    }), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
