"""Driver of test_ray_multinode: engines on a Ray cluster, one after another in this process.

Run as: python ray_run.py {host,npu} MODEL_DIR RAY_ADDRESS CASE [CASE ...], a CASE being
`tp1` (the reference: one worker in this process, no Ray), `ray-tp2` or `ray-pp2`.
Prints one line `RESULT {json}`: per case the greedy ids and, per worker, where it ran
(Ray node, its reserved NPU ids, ASCEND_RT_VISIBLE_DEVICES, the device it computed on).

The Ray workers' environment is this job's runtime_env (vLLM starts its actors with the
job's): the plugin's device choice, and on `npu` the emulated torch_npu with ONE device per
worker process, as a process sees an NPU host when Ray sets ASCEND_RT_VISIBLE_DEVICES.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

LENGTHS = (5, 150, 40, 200, 1, 77)
MAX_NEW = 8
_TESTS = Path(__file__).resolve().parents[1]


def prompts() -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(2, 500) for _ in range(n)] for n in LENGTHS]


def where(wrapper: Any) -> dict[str, Any]:
    """Run in each worker (collective_rpc): its node, Ray reservation, variable, device."""
    import os

    worker = getattr(wrapper, "worker", wrapper)
    node, reserved = None, None
    try:
        import ray

        if ray.is_initialized():
            context = ray.get_runtime_context()
            node = context.get_node_id()
            reserved = context.get_accelerator_ids().get("NPU")
    except ImportError:
        pass
    runner = worker.model_runner
    return {
        "rank": int(worker.rank),
        "local_rank": int(worker.local_rank),
        "pid": os.getpid(),
        "node": node,
        "reserved_npu": reserved,
        "visible": os.environ.get("ASCEND_RT_VISIBLE_DEVICES"),
        "device": str(runner.device),
        "kv_caches": sorted({t.device.type for t in runner.kv_caches}),
        "worker": type(worker).__name__,
    }


def worker_env(device: str) -> dict[str, str]:
    env = {"VLLM_ASCEND_DEVICE": "cpu" if device == "host" else "npu", "OMP_NUM_THREADS": "1"}
    if device == "npu":
        sys.path.insert(0, str(_TESTS))
        from support.torch_npu_emulator.activate import ACTIVE_VAR, DEVICES_VAR, child_env

        emulated = child_env({}, device_count=1)
        env.update({k: emulated[k] for k in emulated if k != DEVICES_VAR})
        env[DEVICES_VAR] = "1"  # what one worker sees once Ray set its visible NPU
        env[ACTIVE_VAR] = "1"
    return env


def run_case(device: str, model: str, case: str) -> dict[str, Any]:
    from vllm import LLM, SamplingParams, TokensPrompt

    sizes = {"tp1": (1, 1), "ray-tp2": (2, 1), "ray-pp2": (1, 2)}[case]
    llm = LLM(
        model=model,
        dtype="float32" if device == "host" else "float16",
        enforce_eager=True,
        max_model_len=512,
        block_size=128,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        kv_cache_memory_bytes=16 << 20,
        seed=0,
        tensor_parallel_size=sizes[0],
        pipeline_parallel_size=sizes[1],
        distributed_executor_backend="ray" if case.startswith("ray") else None,
    )
    try:
        params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
        batch = [TokensPrompt(prompt_token_ids=p) for p in prompts()]
        out = llm.generate(batch, params, use_tqdm=False)
        pc = llm.llm_engine.vllm_config.parallel_config
        return {
            "ids": [list(o.outputs[0].token_ids) for o in out],
            "executor": type(llm.llm_engine.engine_core.engine_core.model_executor).__name__,
            "backend": str(pc.distributed_executor_backend),
            "workers": llm.collective_rpc(where),
        }
    finally:
        placement = llm.llm_engine.vllm_config.parallel_config.placement_group
        llm.llm_engine.engine_core.shutdown()
        _clean_distributed_state()
        if placement is not None:
            # vLLM's Ray executor kills its actors but keeps its placement group until the
            # driver exits; the next engine of this process needs those bundles.
            import ray

            ray.util.remove_placement_group(placement)


def _clean_distributed_state() -> None:
    import torch.distributed

    if "vllm.distributed.parallel_state" in sys.modules and torch.distributed.is_initialized():
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()


def main(device: str, model: str, address: str, cases: list[str]) -> None:
    import ray

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process
    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc(where)
    env = worker_env(device)
    os.environ["VLLM_ASCEND_DEVICE"] = env["VLLM_ASCEND_DEVICE"]
    if device == "npu":
        sys.path.insert(0, str(_TESTS))
        from support.torch_npu_emulator.activate import activate

        activate(device_count=2)
    ray.init(address=address, runtime_env={"env_vars": env}, log_to_driver=True)
    result = {}
    for case in cases:
        started = time.monotonic()
        result[case] = run_case(device, model, case)
        result[case]["seconds"] = round(time.monotonic() - started, 1)
        print(f"CASE {case} {json.dumps(result[case])}", file=sys.stderr, flush=True)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
