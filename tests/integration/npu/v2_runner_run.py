"""One LLM.generate run for the V2-runner test, in a fresh process, printed as JSON.

Run as: python v2_runner_run.py {host,npu} MODEL_DIR. `npu`: the emulated NPU with
VLLM_USE_V2_MODEL_RUNNER=1 (the test's environment), eager, vLLM's V2 Triton kernels in
Triton's interpreter (TRITON_INTERPRET=1) over the `npu` tensors; `host`: the host device
on its own runner (the reference ids). Batch 8 of mixed lengths (three longer than a
step's 64 tokens: chunked prefill), greedy, then the same batch again (a prefix-cache
pass). The result carries the worker's runner class and the plan's runner decision.
An emulator, not Ascend hardware.
"""

from __future__ import annotations

import json
import os
import sys

from generate_run import emulate_npu, prompts

LENGTHS = (5, 150, 40, 200, 1, 131, 77, 20)
MAX_NEW = 6


def runner_facts(worker: object) -> dict[str, object]:
    """The worker's model runner: its class, and its classes' qualified names (MRO)."""
    runner = worker.model_runner  # type: ignore[attr-defined]
    return {
        "runner": type(runner).__name__,
        "mro": [f"{c.__module__}.{c.__qualname__}" for c in type(runner).__mro__],
    }


def main(device: str, model: str) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process
    os.environ["VLLM_ASCEND_DEVICE"] = "cpu" if device == "host" else "npu"
    if device == "npu":
        emulate_npu()
    from vllm import LLM, SamplingParams, TokensPrompt

    llm = LLM(
        model=model,
        dtype="bfloat16",
        enforce_eager=True,
        max_model_len=512,
        block_size=128,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        kv_cache_memory_bytes=32 << 20,
        enable_prefix_caching=True,
        seed=0,
    )
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    batch = [TokensPrompt(prompt_token_ids=p) for p in prompts(0, LENGTHS)]
    passes = [llm.generate(batch, params, use_tqdm=False) for _ in range(2)]
    from adapters.vllm.engine.configure import DEPLOYMENT_ATTR  # noqa: F401 (the plugin)

    config = llm.llm_engine.vllm_config
    (facts,) = llm.collective_rpc(runner_facts)
    print(
        "RESULT "
        + json.dumps(
            {
                "runs": [[list(o.outputs[0].token_ids) for o in out] for out in passes],
                "cached_tokens": [int(o.num_cached_tokens or 0) for o in passes[1]],
                "engine_v2": bool(config.use_v2_model_runner),
                **facts,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
