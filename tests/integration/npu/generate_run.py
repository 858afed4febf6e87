"""One LLM.generate run through the plugin, in a fresh process, printed as JSON.

`host`: the host device (adapters.cpu). `npu`: the NPU platform, worker, runner and
adapter (NpuOps, NpuRuntime) on the emulated torch_npu and the emulated `npu` device,
wired into the container of this process and of every Python process vLLM starts
(support.torch_npu_emulator.activate): weights, KV cache and activations are tensors of
device type npu (in host memory). An emulator, not Ascend hardware.

Run as: python generate_run.py {host,npu} MODEL_DIR [TENSOR_PARALLEL_SIZE [DTYPE]]
(TP=2: one emulated device per rank, the ranks reducing through host gloo.)
`host` takes several model directories joined by os.pathsep: one engine after the other in
this process (one start of Python, torch and vLLM for them all), a RESULT line each, in
order; each engine is shut down before the next starts.
With GENERATE_GRAPH_MODE=PIECEWISE (or another cudagraph_mode, or DEFAULT for the plan's
choice) in the environment the engine runs without enforce_eager in that graph mode,
capturing CAPTURE_SIZES, and the result carries what was captured and replayed and the
per decode step counters (GENERATE_LENGTHS: other prompt lengths).
GENERATE_STALE_GRAPH_ARGUMENTS=1: the runtime's graphs forget the attention op's
parameter update (unit.fakes.graphs), as a backend that skips it would.
GENERATE_CHECK_HOST_DECODE=1: each decode step's host-made inputs are checked against
vLLM's device way (host_decode_check.py); the graph runs' result carries the tally.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

LENGTHS = (5, 150, 40, 200, 1, 131, 77, 263)  # > max_num_batched_tokens: chunked
MAX_NEW = 8
DECODE_STEPS = 6  # extra decode steps measured for the per-step device costs
CAPTURE_SIZES = [1, 2, 4, 8]

_TESTS = Path(__file__).resolve().parents[2]


def emulate_npu() -> object:
    """Wire the container for the NPU path on the emulator; returns the emulated module.

    The test started this process with `child_env`, so the sitecustomize has already
    done it (as in every Python process vLLM starts from here); this returns the module.
    """
    sys.path.insert(0, str(_TESTS))
    from support.torch_npu_emulator.activate import activate

    return activate()


def prompts(seed: int = 0, lengths: tuple[int, ...] = LENGTHS) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(2, 500) for _ in range(n)] for n in lengths]


def seeded(tokens: int, index: int) -> object:
    """Seeded top-k/top-p sampling, request `index`'s own seed."""
    from vllm import SamplingParams

    return SamplingParams(max_tokens=tokens, temperature=0.8, top_k=20, top_p=0.9,
                          seed=7 + index, ignore_eos=True)  # fmt: skip


def decode_step_costs(llm: object, sampling: str = "greedy") -> dict[str, float]:
    """The emulated device's counters per decode step of a batch of 8: a run of
    1 + DECODE_STEPS tokens minus a run of 1 token, over fresh prompts of 8 tokens (all 8
    prefill in one step of max_num_batched_tokens=64, with no prefix-cache hit, so the
    extra steps are all decode steps of 8), divided by DECODE_STEPS; `op:NAME` counts
    each op launched from the host (those that launched any). `sampling`: greedy, or
    seeded (top-k/top-p, a seed a request)."""
    from vllm import SamplingParams, TokensPrompt

    from support.emulated_npu_device import counters, op_counts, reset_counters

    def run(seed: int, tokens: int) -> dict[str, int]:
        batch = [TokensPrompt(prompt_token_ids=p) for p in prompts(seed, (8,) * 8)]
        params: object = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
        if sampling == "seeded":
            params = [seeded(tokens, i) for i in range(len(batch))]
        reset_counters()
        llm.generate(batch, params, use_tqdm=False)  # type: ignore[attr-defined]
        return {**counters(), **{f"op:{k}": v for k, v in op_counts().items()}}

    one, more = run(101, 1), run(102, 1 + DECODE_STEPS)
    steps = {k: (more.get(k, 0) - one.get(k, 0)) / DECODE_STEPS for k in {*one, *more}}
    return {k: v for k, v in sorted(steps.items()) if v or not k.startswith("op:")}


def describe(wrapper: object) -> dict[str, object]:
    """Run in each worker (collective_rpc): its classes and where its tensors live."""
    from vllm.model_executor.layers.linear import LinearBase

    worker = getattr(wrapper, "worker", wrapper)  # the multiprocess executor wraps it
    runner = worker.model_runner  # type: ignore[attr-defined]
    layer = runner.model.model.layers[0]
    return {
        "quant_methods": sorted(
            {type(m.quant_method).__name__ for m in runner.model.modules()
             if getattr(m, "quant_method", None) is not None}
        ),
        "worker": type(worker).__name__,
        "ops": type(layer.input_layernorm.device_ops).__name__,
        # Weight memory: measured by the runner through the runtime port across the load,
        # and the distinct storages the model holds (parameters and derived `ascend_*`
        # tensors; buffers apart).
        "weights_measured": int(getattr(runner, "model_memory_usage", -1)),
        "weights_held": _storage_bytes(
            [*runner.model.parameters(),
             *(v for m in runner.model.modules() for k, v in vars(m).items()
               if k.startswith("ascend_"))]),
        "buffers": _storage_bytes(list(runner.model.buffers())),
        "linears": sum(isinstance(m, LinearBase) for m in runner.model.modules()),
        "device": str(runner.device),
        "devices": {
            "parameters": sorted({p.device.type for p in runner.model.parameters()}),
            "kv_caches": sorted({t.device.type for t in runner.kv_caches}),
        },
    }


def worker_graphs(wrapper: object, reset: bool = False) -> dict[str, object]:
    """Run in each worker (collective_rpc): the graphs it captured and its emulated
    device's counters (then reset when asked); with TP > 1 the workers are processes of
    their own, whose counters the engine's process does not see."""
    from vllm.compilation.counter import compilation_counter

    from support.emulated_npu_device import counters, reset_counters

    runner = getattr(wrapper, "worker", wrapper).model_runner  # type: ignore[attr-defined]
    tail = getattr(runner, "_tail", None)
    out = {
        "captured": compilation_counter.num_cudagraph_captured,
        "counters": counters(),
        # The runner's class and its classes' qualified names (V1 or V2), and on V2 the
        # decode steps sampled from a FULL graph's logits and by its greedy tail.
        "runner": type(runner).__name__,
        "mro": [f"{c.__module__}.{c.__qualname__}" for c in type(runner).__mro__],
        "graph_logits_steps": getattr(runner, "graph_logits_steps", None),
        "tail_steps": getattr(tail, "served_steps", None),
    }
    if reset:
        reset_counters()
    return out


def _storage_bytes(values: list[object]) -> int:
    import torch

    storages = {v.untyped_storage().data_ptr(): v.untyped_storage().nbytes()
                for v in values if isinstance(v, torch.Tensor)}
    return sum(storages.values())


def main(device: str, model: str, tp: int = 1, dtype: str = "bfloat16") -> object:
    """One engine's run, printed as its RESULT line; returns the engine."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process
    os.environ["VLLM_ASCEND_DEVICE"] = "cpu" if device == "host" else "npu"
    torch_npu = emulate_npu() if device == "npu" else None
    if torch_npu is not None and os.environ.get("GENERATE_STALE_GRAPH_ARGUMENTS"):
        from adapters.container import container
        from unit.fakes.graphs import StaleGraphsRuntime

        runtime = container().npu_device.runtime
        runtime.override(StaleGraphsRuntime(runtime()))
    host_decode: dict[str, object] = {}
    if torch_npu is not None and os.environ.get("GENERATE_CHECK_HOST_DECODE"):
        from integration.npu.host_decode_check import check_host_decode

        host_decode = check_host_decode()
    from vllm import LLM, SamplingParams, TokensPrompt
    from vllm.compilation.counter import compilation_counter
    from vllm.platforms import current_platform

    graph_mode = os.environ.get("GENERATE_GRAPH_MODE")
    lengths = tuple(int(n) for n in os.environ.get("GENERATE_LENGTHS", "").split(",") if n)
    # GENERATE_GRAPH_MODE=DEFAULT: no cudagraph_mode given, the plan's choice.
    compilation: dict[str, object] = {"cudagraph_capture_sizes": CAPTURE_SIZES}
    if graph_mode and graph_mode != "DEFAULT":
        compilation["cudagraph_mode"] = graph_mode
    graphs: dict[str, object] = {"compilation_config": compilation} if graph_mode else {}
    llm = LLM(
        model=model,
        dtype=dtype,  # the NPU attention op takes fp16/bf16 queries only
        enforce_eager=not graph_mode,
        **graphs,  # type: ignore[arg-type]
        max_model_len=512,
        block_size=128,  # the NPU op's paged prefill needs a multiple of 128
        max_num_batched_tokens=64,
        max_num_seqs=8,
        kv_cache_memory_bytes=32 << 20,
        enable_prefix_caching=True,
        seed=0,
        tensor_parallel_size=tp,
    )
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    batch = [TokensPrompt(prompt_token_ids=p) for p in prompts(0, lengths or LENGTHS)]
    if lengths:  # the graph runs: two passes and their counters, no sampling or cost runs
        captured = compilation_counter.num_cudagraph_captured
        ranks: list[dict[str, object]] = []
        if device == "npu" and tp > 1:  # the workers' own processes: asked over RPC
            ranks = llm.collective_rpc(worker_graphs, kwargs={"reset": True})
            captured = ranks[0]["captured"]
        elif device == "npu":
            from support.emulated_npu_device import counters, reset_counters

            reset_counters()
        # Two passes: the second finds the prompts' full blocks in the prefix cache.
        passes = [llm.generate(batch, params, use_tqdm=False) for _ in range(2)]
        compilation = llm.llm_engine.vllm_config.compilation_config
        after = llm.collective_rpc(worker_graphs) if ranks else []
        here = counters() if device == "npu" and not after else {}
        device_counters = after[0]["counters"] if after else here
        # Seeded top-k/top-p, twice: the same ids (each request's own generator), those
        # of the eager run; decoding together in batches padded to a captured size.
        short = [TokensPrompt(prompt_token_ids=p) for p in prompts(5, (5, 40, 1, 20, 9))]
        seeded_runs = [
            [list(o.outputs[0].token_ids) for o in llm.generate(
                short, [seeded(MAX_NEW, i) for i in range(len(short))], use_tqdm=False)]
            for _ in range(2)
        ]  # fmt: skip
        in_process = torch_npu is not None and tp == 1  # the worker's calls are counted here
        print("RESULT " + json.dumps({
            "platform": type(current_platform).__name__,
            "device_type": current_platform.device_type,
            "devices": llm.collective_rpc(describe)[0]["devices"],
            "calls": sorted({name for name, _, _ in torch_npu.calls}) if in_process else [],
            "runs": [[list(o.outputs[0].token_ids) for o in out] for out in passes],
            "cached_tokens": [int(o.num_cached_tokens or 0) for o in passes[1]],
            "graph_mode": str(compilation.cudagraph_mode.name),
            "capture_sizes": compilation.cudagraph_capture_sizes,
            "captured": captured,
            "rank_captured": [r["captured"] for r in ranks],
            "rank_counters": [r["counters"] for r in after],
            "rank_runners": [
                {k: r[k] for k in ("runner", "mro", "graph_logits_steps", "tail_steps")}
                for r in after
            ],
            "engine_v2": bool(llm.llm_engine.vllm_config.use_v2_model_runner),
            "counters": device_counters,
            "decode_step": decode_step_costs(llm) if device == "npu" and tp == 1 else {},
            "decode_step_seeded": decode_step_costs(llm, "seeded")
            if device == "npu" and tp == 1
            else {},
            "seeded_runs": seeded_runs,
            "host_decode": host_decode,
        }), flush=True)
        return llm
    outputs = [llm.generate(batch, params, use_tqdm=False) for _ in range(2)]
    runs = [[list(o.outputs[0].token_ids) for o in run] for run in outputs]
    # Seeded top-k/top-p sampling: the NPU's declared torch path (npu-top-k-top-p-torch).
    # Prompts that fit one step (5 + 40 + 1 tokens): a chunked prefill would make vLLM
    # rewind a seeded generator's Philox offset, which the emulator's CPU generators lack.
    sampling = SamplingParams(max_tokens=MAX_NEW, temperature=0.8, top_k=20, top_p=0.9, seed=7)
    short = [batch[0], batch[2], batch[4]]
    sampled = [list(o.outputs[0].token_ids) for o in llm.generate(short, sampling, use_tqdm=False)]
    # The second pass finds the prompts' full blocks in the prefix cache.
    cached = [int(o.num_cached_tokens or 0) for o in outputs[1]]
    ranks = llm.collective_rpc(describe)
    in_process = torch_npu is not None and tp == 1  # the worker's calls are counted here
    result = {
        "platform": type(current_platform).__name__,
        "device_type": current_platform.device_type,
        "worker": ranks[0]["worker"],
        "ops": ranks[0]["ops"],
        "runs": runs,
        "quant_methods": ranks[0]["quant_methods"],
        "quantization": llm.llm_engine.vllm_config.model_config.quantization,
        "sampled": sampled,
        "devices": ranks[0]["devices"],
        "weights": {k: ranks[0][k]
                    for k in ("weights_measured", "weights_held", "buffers", "linears")},
        "rank_devices": [r["device"] for r in ranks],
        "async_scheduling": bool(llm.llm_engine.vllm_config.scheduler_config.async_scheduling),
        "graph_mode": str(llm.llm_engine.vllm_config.compilation_config.cudagraph_mode.name),
        "captured": compilation_counter.num_cudagraph_captured,
        "decode_step": decode_step_costs(llm) if in_process else {},
        "cached_tokens": cached,
        "calls": sorted({name for name, _, _ in torch_npu.calls}) if in_process else [],
        # How the attention op was called: (input_layout, with rope inputs, sparse_mode).
        "attention_calls": sorted(
            {
                (b["input_layout"], b["query_rope"] is not None, b["sparse_mode"])
                for b in torch_npu.calls_of("npu_fused_infer_attention_score")
            }
        )
        if in_process
        else [],
        "sparse_modes": sorted(
            {b["sparse_mode"] for b in torch_npu.calls_of("npu_fused_infer_attention_score")}
        )
        if in_process
        else [],
    }
    print("RESULT " + json.dumps(result), flush=True)
    return llm


def run_all(device: str, models: list[str], *rest: object) -> None:
    """main() for each model, one after the other (the host only: the emulated NPU's
    counters and recorded calls are the process's, so an NPU run keeps a process of its
    own)."""
    assert device == "host" or len(models) == 1, "several models run on the host only"
    for at, model in enumerate(models):
        llm = main(device, model, *rest)  # type: ignore[arg-type]
        if at < len(models) - 1:
            sys.path.insert(0, str(_TESTS))
            from integration.vllm.engine_teardown import shut_down

            shut_down(llm)
            del llm


if __name__ == "__main__":
    run_all(sys.argv[1], sys.argv[2].split(os.pathsep),
            *(int(sys.argv[3]), *sys.argv[4:5]) if len(sys.argv) > 3 else ())  # fmt: skip
