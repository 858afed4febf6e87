"""One Qwen3-Next LLM.generate run (bf16) in a fresh process, printed as JSON.

Run as: python qwen3_next_run.py {host,npu} MODEL_DIR. `npu`: the NPU platform, worker
and adapters on the emulated torch_npu and device (see generate_run.py); an emulator,
not Ascend hardware. A batch of 8 mixed lengths with chunked prefill (64-token steps); the
NPU run without enforce_eager, in the graph mode the plan gives it.
"""

from __future__ import annotations

import json
import os
import sys

from generate_run import CAPTURE_SIZES, emulate_npu, prompts

LENGTHS = (5, 150, 40, 200, 1, 131, 77, 263)
MAX_NEW = 8


def main(device: str, model: str) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_ASCEND_DEVICE"] = "cpu" if device == "host" else "npu"
    tnpu = emulate_npu() if device == "npu" else None
    from vllm import LLM, SamplingParams, TokensPrompt
    from vllm.compilation.counter import compilation_counter

    # The host eagerly; the NPU in the plan's graph mode (FULL_AND_PIECEWISE for these).
    graphs: dict[str, object] = (
        {"compilation_config": {"cudagraph_capture_sizes": CAPTURE_SIZES}}
        if device == "npu" else {"enforce_eager": True}
    )
    llm = LLM(
        model=model, dtype="bfloat16", max_model_len=512, max_num_batched_tokens=64,
        max_num_seqs=8, kv_cache_memory_bytes=32 << 20, seed=0, **graphs,  # type: ignore[arg-type]
    )
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    batch = [TokensPrompt(prompt_token_ids=p) for p in prompts(0, LENGTHS)]
    out = llm.generate(batch, params, use_tqdm=False)
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    ops = sorted({name for name, _, _ in getattr(tnpu, "calls", [])})
    result = {
        "ids": [list(o.outputs[0].token_ids) for o in out],
        "block_size": llm.llm_engine.vllm_config.cache_config.block_size,
        "kv_devices": sorted({t.device.type for t in runner.kv_caches}),
        "torch_npu_ops": ops,
        "graph_mode": llm.llm_engine.vllm_config.compilation_config.cudagraph_mode.name,
        "captured": compilation_counter.num_cudagraph_captured,
        "counters": {},
    }
    if tnpu is not None:  # the emulated device's tallies (support/ is on the NPU path)
        from support.emulated_npu_device import counters

        result["counters"] = counters()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
