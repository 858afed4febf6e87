"""One LLM.generate run for the V2-runner test, in a fresh process, printed as JSON.

Run as: python v2_runner_run.py {host,npu} MODEL_DIR [GRAPH_MODE]. `npu`: the emulated NPU with
VLLM_USE_V2_MODEL_RUNNER=1 (the test's environment), eager, vLLM's V2 Triton kernels in
Triton's interpreter (TRITON_INTERPRET=1) over the `npu` tensors; `host`: the host device
on its own runner (the reference ids). Batch 8 of mixed lengths (three longer than a
step's 128 tokens: chunked prefill), greedy, then the same batch again (a prefix-cache
pass; V2_ONE_PASS=1: the first pass only). The result carries the worker's runner class
and the plan's runner decision.
GRAPH_MODE (a cudagraph_mode, e.g. FULL_DECODE_ONLY, or PLAN for the plan's choice): not
eager, graphs of CAPTURE_SIZES; the result carries the graph mode, the graphs captured and
the emulated device's counters. Each step's top-2 logprobs come back too (a parting from
the reference is judged by the reference's gap). With graphs (and both passes) the result also
carries what one greedy decode step costs outside the replay (`decode_step`: batch 8,
no logprobs, (a run of 1 + DECODE_STEPS tokens - a run of 1) / DECODE_STEPS: the device's
counters, the Triton kernels launched and each launch's origin, as
scripts/bench_npu_emulated.py counts them) and the ids of a pass whose even requests are
greedy and odd ones seeded (`mixed`: FULL replays the greedy tail does not serve).
V2_STALE_GRAPH_ARGUMENTS=1: the runtime's
graphs forget the attention op's update (unit.fakes.graphs), as a backend skipping it.
An emulator, not Ascend hardware.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from generate_run import emulate_npu, prompts, seeded

LENGTHS = (5, 150, 40, 200, 1, 131, 77, 20)
MAX_NEW = 4
STEP_TOKENS = 128  # a step's token budget: the three longest prompts take two steps
GPU_PACKAGE = "vllm.v1.worker.gpu."
CAPTURE_SIZES = [1, 2, 4, 8]
DECODE_STEPS = 2  # the decode steps a per-step figure is measured over
QUIET_INTERPRETER: list[bool] = []  # non-empty: the interpreter's copies are not counted


def runner_facts(worker: object) -> dict[str, object]:
    """The worker's model runner: its class, its classes' qualified names (MRO), and (V2)
    the steps it sampled from a FULL decode graph's logits."""
    runner = worker.model_runner  # type: ignore[attr-defined]
    return {
        "runner": type(runner).__name__,
        "mro": [f"{c.__module__}.{c.__qualname__}" for c in type(runner).__mro__],
        "graph_logits_steps": getattr(runner, "graph_logits_steps", None),
        "tail_steps": getattr(getattr(runner, "_tail", None), "served_steps", None),
        # Steps whose block-table rows and slots the host mirror made (v2_host_block_tables).
        "host_table_steps": getattr(
            getattr(getattr(runner, "_tail", None), "tables", None), "steps", None
        ),
    }


def decode_step(llm: Any, launches: dict[str, list[float]]) -> dict[str, Any]:
    """One greedy decode step's costs at batch 8 (no logprobs): the emulated device's
    counters, the Triton kernels launched (name -> launches) and each launch and copy by
    origin (`what @ where`), over fresh prompts of 12 tokens, after a warm-up run."""
    from vllm import SamplingParams, TokensPrompt

    from support.emulated_npu_device import counters, launch_sources, reset_counters

    def run(seed: int, tokens: int) -> tuple[dict[str, float], dict[str, float]]:
        # 8 prompts of 12 tokens: their prefill is one step (within STEP_TOKENS), every
        # later step a decode step of the 8.
        batch = [TokensPrompt(prompt_token_ids=p) for p in prompts(seed, (12,) * 8)]
        params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
        before = {name: n for name, (n, _) in launches.items()}
        reset_counters()
        with launch_sources() as seen:
            llm.generate(batch, params, use_tqdm=False)
        kernels = {f"triton:{k}": n - before.get(k, 0) for k, (n, _) in launches.items()}
        at = {f"{what} @ {where}": float(n) for (what, where), n in seen.items()}
        return {**counters(), **kernels}, at

    QUIET_INTERPRETER.append(True)
    try:
        # A first run sends request-state values no later run sends again (V2 re-sends
        # one only when it changed): a warm-up, as the benchmark's.
        run(100, 1)
        (one, at_one), (more, at_more) = run(101, 1), run(102, 1 + DECODE_STEPS)
    finally:
        QUIET_INTERPRETER.clear()
    per = {k: (more.get(k, 0) - one.get(k, 0)) / DECODE_STEPS for k in more}
    sources = {k: (at_more.get(k, 0) - at_one.get(k, 0)) / DECODE_STEPS for k in at_more}
    return {"counters": per, "sources": sources}


def record_launches() -> dict[str, list[float]]:
    """Each Triton kernel launched in the interpreter (TRITON_INTERPRET=1): its module
    under vllm/v1/worker/gpu (or its full module elsewhere) and name -> [launches,
    seconds]."""
    import time

    from triton.runtime.interpreter import InterpretedFunction

    launches: dict[str, list[float]] = {}
    run = InterpretedFunction.run

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        module = self.fn.__module__.removeprefix(GPU_PACKAGE).replace(".", "/")
        entry = launches.setdefault(f"{module}.{self.fn.__name__}", [0, 0.0])
        start = time.perf_counter()
        try:
            if not QUIET_INTERPRETER:
                return run(self, *args, **kwargs)
            # One launch on an NPU: the interpreter's own copies (it runs the kernel in
            # numpy) are not the step's (as scripts/bench_npu_emulated.py counts them).
            from support.emulated_npu_device import uncounted

            with uncounted():
                return run(self, *args, **kwargs)
        finally:
            entry[0] += 1
            entry[1] += time.perf_counter() - start

    InterpretedFunction.run = counted  # type: ignore[method-assign]
    return launches


def main(device: str, model: str, graph_mode: str | None = None) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process
    os.environ["VLLM_ASCEND_DEVICE"] = "cpu" if device == "host" else "npu"
    launches: dict[str, list[float]] = {}
    if device == "npu":
        emulate_npu()
        launches = record_launches()
        if os.environ.get("V2_STALE_GRAPH_ARGUMENTS"):
            from adapters.container import container
            from unit.fakes.graphs import StaleGraphsRuntime

            runtime = container().npu_device.runtime
            runtime.override(StaleGraphsRuntime(runtime()))
    from vllm import LLM, SamplingParams, TokensPrompt
    from vllm.compilation.counter import compilation_counter

    graphs: dict[str, Any] = {}
    if graph_mode:
        compilation: dict[str, Any] = {"cudagraph_capture_sizes": CAPTURE_SIZES}
        if graph_mode != "PLAN":
            compilation["cudagraph_mode"] = graph_mode
        graphs = {"compilation_config": compilation}
    start = time.perf_counter()
    llm = LLM(
        model=model,
        dtype="bfloat16",
        enforce_eager=not graph_mode,
        **graphs,
        max_model_len=512,
        block_size=128,
        max_num_batched_tokens=STEP_TOKENS,
        max_num_seqs=8,
        kv_cache_memory_bytes=32 << 20,
        enable_prefix_caching=True,
        seed=0,
    )
    started = time.perf_counter() - start
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True, logprobs=2)
    batch = [TokensPrompt(prompt_token_ids=p) for p in prompts(0, LENGTHS)]
    captured = compilation_counter.num_cudagraph_captured
    if device == "npu":
        from support.emulated_npu_device import reset_counters

        reset_counters()
    start = time.perf_counter()
    count = 1 if os.environ.get("V2_ONE_PASS") else 2
    passes = [llm.generate(batch, params, use_tqdm=False) for _ in range(count)]
    generated = time.perf_counter() - start

    config = llm.llm_engine.vllm_config
    device_counters: dict[str, Any] = {}
    if device == "npu":
        from support.emulated_npu_device import counters

        device_counters = counters()
    mixed, step = None, None
    if device == "npu" and graph_mode and count == 2:
        step = decode_step(llm, launches)
        # Even rows greedy, odd rows seeded: FULL replays whose greedy tail does not serve
        # the step (V2's sampler and update run after them); the greedy rows' ids are
        # still the reference's.
        greedy = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
        params_mixed = [greedy if i % 2 == 0 else seeded(MAX_NEW, i) for i in range(len(batch))]
        out = llm.generate(batch, params_mixed, use_tqdm=False)
        mixed = [list(o.outputs[0].token_ids) for o in out]
    (facts,) = llm.collective_rpc(runner_facts)
    print(
        "RESULT "
        + json.dumps(
            {
                "runs": [[list(o.outputs[0].token_ids) for o in out] for out in passes],
                "top2": [
                    [sorted((lp.logprob for lp in step.values()), reverse=True)[:2]
                     for step in o.outputs[0].logprobs or []]
                    for o in passes[0]
                ],
                "cached_tokens": [int(o.num_cached_tokens or 0) for o in passes[-1]],
                "engine_v2": bool(config.use_v2_model_runner),
                "graph_mode": config.compilation_config.cudagraph_mode.name,
                "captured": captured,
                "counters": device_counters,
                "launches": launches,
                "seconds": {"start": started, "generate": generated},
                "decode_step": step,
                "mixed": mixed,
                **facts,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
