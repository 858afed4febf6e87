"""Per decode step costs of the NPU path on the emulated `npu` device, eager against each
graph mode (a benchmark, not a test).

    .venv/bin/python scripts/bench_npu_emulated.py [--model-style STYLE] [--steps N] \\
        [--modes eager,PIECEWISE,FULL_DECODE_ONLY,FULL_AND_PIECEWISE] [--batches 1,8] \\
        [--sampling greedy,seeded] [--runners v1,v2]
    .venv/bin/python scripts/bench_npu_emulated.py --kernel-launches

STYLE: llama, qwen3, qwen3_moe (experts through torch_npu's MoE ops) or deepseek_v3_npu_mla
(MLA at the shapes torch_npu documents, scripts/make_models.py --size npu-mla).
MODES: `eager` (enforce_eager) and vLLM cudagraph_mode names; each runs in a fresh process
(one engine each), asking for that mode with capture sizes 1, 2, 4 and 8. The table says
which mode the plan served (a mode the NPU cannot capture yet is served as another, logged
with its reason). SAMPLING: `greedy` (temperature 0) and/or `seeded` (temperature 0.8,
top-k 20, top-p 0.9, a seed per request); each is a row per mode and batch. RUNNERS:
`v1` (vLLM's GPUModelRunner, the default) and/or `v2` (vLLM's Model Runner V2,
VLLM_USE_V2_MODEL_RUNNER=1: its Triton kernels run in Triton's interpreter, each launch
counted in its own column, a launch on an NPU, the interpreter's copies inside one left
uncounted; its host time is the interpreter's, not comparable).

Runs LLM.generate through AscendNpuPlatform -> NpuWorker -> NpuModelRunner on the emulated
device and prints, per decode step at each batch: graph replays, ops launched from the
host outside replays (aten ops through the device's fallback plus one per torch_npu
kernel), device-to-device copies outside replays (a launch each too), the recorded ops
the replays ran, device-to-host syncs (copies to the host, scalar reads, data-dependent
output sizes) and copies, host-to-device copies, and the step's host time on the
emulator; for each graph mode, every launch and copy of a decode step by where it comes
from (the model runner's method, and the nearest frame of vLLM or the plugin). Each
figure is (run of 1 + N tokens - run of 1 token) / N over fresh prompts, after a first
run of 1 token (warm-up, not counted); the host time
is the median CPU time of one engine step (after the prefill step; the engine runs in
the process, one thread) over 3 runs of 1 + N tokens. Proxies of NPU efficiency
measured on an emulator, not Ascend hardware.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


STYLES = ("llama", "qwen3", "qwen3_moe", "deepseek_v3_npu_mla")
CAPTURE_SIZES = [1, 2, 4, 8]
_RESULT = "BENCH_RESULT "
# Decode steps are timed one engine step at a time, in CPU time (on a shared host wall
# time mostly measures the neighbours), over this many runs; the median counts.
REPEATS = 3


def _model_dir(style: str) -> tuple[str, str]:
    """The model's directory and how the table names it."""
    from support.hf_reference import MODELS_DIR, local_model, make_model

    if style == "deepseek_v3_npu_mla":
        return str(make_model(MODELS_DIR / "npu-mla-deepseek_v3", "deepseek_v3", "npu-mla")), (
            "deepseek_v3 npu-mla"
        )
    return str(local_model(style, "tiny")), f"{style} tiny"


def _emulator_env(runner: str = "v1") -> dict[str, str]:
    from support.torch_npu_emulator.activate import child_env

    base = {k: v for k, v in os.environ.items() if k != "VLLM_USE_V2_MODEL_RUNNER"}
    if runner == "v2":  # triton-ascend's driver presented, its kernels interpreted
        base.update(VLLM_USE_V2_MODEL_RUNNER="1", TRITON_INTERPRET="1")
        base["VLLM_ASCEND_TRITON_KERNELS"] = "off"  # the plugin's own: torch path, as V1
    env = child_env(base, triton_driver=runner == "v2")
    env["VLLM_ASCEND_DEVICE"] = "npu"
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process: its counters
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def sampling_params(sampling: str, tokens: int, index: int) -> Any:
    """The SamplingParams of request `index` in a run of `sampling` (greedy or seeded)."""
    from vllm import SamplingParams

    if sampling == "seeded":
        return SamplingParams(max_tokens=tokens, temperature=0.8, top_k=20, top_p=0.9,
                              seed=1000 + index, ignore_eos=True)  # fmt: skip
    return SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)


def measure(
    model: str, mode: str, steps: int, batches: list[int], sampling: str = "greedy"
) -> dict[str, Any]:
    """In a process started under the emulator: one engine in `mode`, its per-step costs."""
    from support.torch_npu_emulator.activate import activate

    activate()
    triton = _count_triton_launches()
    from vllm import LLM, TokensPrompt

    from support.emulated_npu_device import counters, launch_sources, op_counts, reset_counters

    graphs: dict[str, Any] = {}
    if mode != "eager":
        graphs = {
            "compilation_config": {
                "cudagraph_mode": mode,
                "cudagraph_capture_sizes": CAPTURE_SIZES,
            }
        }
    llm = LLM(
        model=model,
        dtype="bfloat16",
        enforce_eager=mode == "eager",
        max_model_len=512,
        block_size=128,
        max_num_seqs=max(batches),
        kv_cache_memory_bytes=32 << 20,
        seed=0,
        **graphs,
    )
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    served = llm.llm_engine.vllm_config.compilation_config.cudagraph_mode.name
    rng = random.Random(0)

    def run(batch: int, tokens: int) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        prompts = [
            TokensPrompt(prompt_token_ids=[rng.randrange(2, 500) for _ in range(24)])
            for _ in range(batch)
        ]
        params = [sampling_params(sampling, tokens, i) for i in range(batch)]
        reset_counters()
        triton.clear()
        with launch_sources() as seen:
            llm.generate(prompts, params, use_tqdm=False)
        at = {f"{what} @ {where}": n for (what, where), n in seen.items()}
        return {**counters(), "triton_launches": sum(triton.values())}, op_counts(), at

    def decode_step_seconds(batch: int, tokens: int) -> list[float]:
        """Each engine step's CPU time after the first (the prefill of all prompts): this
        process's, the engine's included, so waiting for a busy host's cores is left out."""
        engine = llm.llm_engine
        for i in range(batch):
            prompt = TokensPrompt(prompt_token_ids=[rng.randrange(2, 500) for _ in range(24)])
            params = sampling_params(sampling, tokens, i)
            engine.add_request(f"timed-{batch}-{rng.random()}-{i}", prompt, params)
        seconds = []
        while engine.has_unfinished_requests():
            start = time.process_time()
            engine.step()
            seconds.append(time.process_time() - start)
        return seconds[1:]

    rows: dict[str, Any] = {}
    for batch in batches:
        # A first run of 1 token sends what no later run sends again (V2 re-sends a
        # request-state value only when it changed), so it warms up before both.
        run(batch, 1)
        (one, ops_one, at_one), (more, ops_more, at_more) = run(batch, 1), run(batch, 1 + steps)
        per = {k: (more[k] - one[k]) / steps for k in one}
        ops = {k: (ops_more.get(k, 0) - ops_one.get(k, 0)) / steps for k in ops_more}
        sources = {k: (at_more.get(k, 0) - at_one.get(k, 0)) / steps for k in at_more}
        timed = sorted(t for _ in range(REPEATS) for t in decode_step_seconds(batch, 1 + steps))
        host_ms = 1000 * timed[len(timed) // 2]
        rows[str(batch)] = {"per_step": per, "host_ms": host_ms, "ops": ops, "sources": sources}
    return {
        "served": served,
        "runner": "V2" if llm.llm_engine.vllm_config.use_v2_model_runner else "V1",
        "layers": len(runner.model.model.layers),
        "batches": rows,
    }


def _count_triton_launches() -> dict[str, int]:
    """Kernel name -> launches of Triton kernels run in Triton's interpreter (V2's), counted
    from now on; empty where Triton is not interpreted."""
    launched: dict[str, int] = {}
    if os.environ.get("TRITON_INTERPRET") != "1":
        return launched
    from triton.runtime.interpreter import InterpretedFunction

    from support.emulated_npu_device import uncounted

    run = InterpretedFunction.run

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        # One launch on an NPU; the interpreter's own copies to and from the host (it
        # runs the kernel in numpy) are not the step's, so the device counts none of them.
        launched[self.fn.__name__] = launched.get(self.fn.__name__, 0) + 1
        with uncounted():
            return run(self, *args, **kwargs)

    InterpretedFunction.run = counted  # type: ignore[method-assign]
    return launched


def _child(
    model: str, mode: str, steps: int, batches: list[int], sampling: str, runner: str = "v1"
) -> dict[str, Any]:
    command = [sys.executable, __file__, "--measure", mode, "--model-dir", model,
               "--steps", str(steps), "--batches", ",".join(map(str, batches)),
               "--sampling", sampling]  # fmt: skip
    done = subprocess.run(command, env=_emulator_env(runner), capture_output=True, text=True)
    for line in done.stdout.splitlines():
        if line.startswith(_RESULT):
            result: dict[str, Any] = json.loads(line.removeprefix(_RESULT))
            return result
    raise RuntimeError(f"mode {mode}: no result (exit {done.returncode}):\n{done.stderr[-4000:]}")


def _table(named: str, results: dict[str, dict[str, Any]], batches: list[int]) -> None:
    from support.emulated_npu_device import launches, syncs

    layers = next(iter(results.values()))["layers"]
    print(f"model {named}, {layers} decoder layers, bf16, block 128, captured sizes "
          f"{CAPTURE_SIZES}; per decode step (emulator, not Ascend hardware)")  # fmt: skip
    print(
        "| runner | asked | runs | sampling | batch | replays | host launches | Triton launches "
        "| D2D copies | replayed ops | D2H syncs | of which D2H copies | H2D copies "
        "| host CPU ms |"
    )
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for run, result in results.items():
        mode, sampling = run.split("/")[:2]
        for batch in batches:
            row = result["batches"][str(batch)]
            per = row["per_step"]
            print(
                f"| {result.get('runner', 'V1')} "
                f"| {mode} | {result['served'] if mode != 'eager' else 'eager'} | {sampling} "
                f"| {batch} "
                f"| {per['graph_replays']:.1f} | {launches(per):.1f} "
                f"| {per.get('triton_launches', 0):.1f} | {per['d2d_copies']:.1f} "
                f"| {per['graph_replayed_ops']:.1f} | {syncs(per):.2f} "
                f"| {per['d2h_copies']:.2f} | {per['h2d_copies']:.2f} | {row['host_ms']:.1f} |"
            )
    for mode, result in results.items():  # mode: "MODE/SAMPLING/RUNNER"
        ops = result["batches"][str(max(batches))]["ops"]
        print(f"\n{mode}: ops launched from the host per decode step at batch {max(batches)}:")
        for name, n in sorted(ops.items(), key=lambda kv: -kv[1])[:12]:
            if n > 0:
                print(f"  {n:6.1f}  {name}")
        if mode.startswith("eager/"):
            continue
        # Every launch and copy outside the replays, by where it comes from (the runner's
        # method <- the nearest frame of vLLM or the plugin).
        sources = result["batches"][str(max(batches))]["sources"]
        print(f"{mode}: each launch and copy per decode step at batch {max(batches)}, by origin:")
        for name, n in sorted(sources.items(), key=lambda kv: (kv[0].split(" @ ")[1], kv[0])):
            if n >= 0.5:
                print(f"  {n:6.1f}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-style", default="llama", choices=STYLES)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument(
        "--modes",
        default="eager,PIECEWISE",
        help="comma-separated: eager and/or vLLM cudagraph_mode names (default eager,PIECEWISE)",
    )
    parser.add_argument("--batches", default="1,8", help="decode batch sizes (default 1,8)")
    parser.add_argument(
        "--sampling",
        default="greedy",
        help="comma-separated: greedy and/or seeded (top-k/top-p, a seed a request)",
    )
    parser.add_argument(
        "--runners",
        default="v1",
        help="comma-separated: v1 and/or v2 (vLLM's Model Runner V2; default v1)",
    )
    parser.add_argument(
        "--kernel-launches",
        action="store_true",
        help="only print the launches per decode step of the roles the NPU's Triton kernels "
        "take (slot mapping, top-k/top-p, rejection sampler), torch path against Triton path",
    )
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # one mode, in a child
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.kernel_launches:
        from support.torch_npu_emulator.activate import ACTIVE_VAR

        if os.environ.get(ACTIVE_VAR) != "1":  # again, under the emulator
            os.execvpe(sys.executable, [sys.executable, *sys.argv], _emulator_env())
        kernel_launches()
        return
    batches = [int(b) for b in args.batches.split(",")]
    if args.measure:
        result = measure(args.model_dir, args.measure, args.steps, batches, args.sampling)
        print(_RESULT + json.dumps(result), flush=True)
        return
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    known = {"eager", "NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"}
    if unknown := [m for m in modes if m not in known]:
        parser.error(f"unknown modes {unknown}; choose from {sorted(known)}")
    model, named = _model_dir(args.model_style)
    samplings = [s.strip() for s in args.sampling.split(",") if s.strip()]
    if unknown := [s for s in samplings if s not in ("greedy", "seeded")]:
        parser.error(f"unknown sampling {unknown}; choose from greedy, seeded")
    runners = [r.strip() for r in args.runners.split(",") if r.strip()]
    if unknown := [r for r in runners if r not in ("v1", "v2")]:
        parser.error(f"unknown runners {unknown}; choose from v1, v2")
    results = {
        f"{mode}/{sampling}/{runner}": _child(model, mode, args.steps, batches, sampling, runner)
        for mode in modes
        for sampling in samplings
        for runner in runners
    }
    _table(named, results, batches)


def kernel_launches(batch: int = 8, vocab: int = 32000, drafts: int = 3) -> None:
    """--kernel-launches: each role's call at decode shapes (batch 8, one token a request;
    rejection: 3 drafts a request, random verification) on the emulated device: launches
    of the torch path (ops the device dispatched) against the Triton path (one per kernel,
    plus the wrapper's own ops; the kernels stubbed, so the interpreter's copies are not
    counted). One call of each role a decode step; rejection only with speculative
    decoding. Launch counts on an emulator, not timings, and not Ascend hardware."""
    import torch

    from adapters.npu import triton_kernels as tk
    from adapters.npu.sampling import NpuSamplingOps
    from adapters.npu.slot_mapping import NpuSlotMapping
    from adapters.torch.rejection import TorchRejectionOps
    from ascend_core.triton_kernels import KernelPath, KernelPathDecision
    from ports.rejection import Drafts
    from support.emulated_npu_device import counters, reset_counters
    from support.torch_npu_emulator.activate import activate

    activate()
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    dev = torch.device("npu")
    gen = torch.Generator().manual_seed(0)
    n = batch * drafts

    class Stub:
        """A kernel module whose launchers only count (each launches one kernel)."""

        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return lambda *a, **k: a[0] if name in ("expand_to_tokens", "recover") else None

    stub = tk.TritonKernels(
        KernelPathDecision(KernelPath.TRITON, "stub"), dict.fromkeys(tk.MODULES, Stub())
    )
    table = torch.randint(0, 100, (batch, 16), dtype=torch.int32, generator=gen).to(dev)
    slot_args = (
        batch,
        batch + 8,
        torch.arange(batch + 1, dtype=torch.int32).to(dev),
        torch.randint(0, 1024, (batch,), generator=gen).to(dev),
        table,
        table.stride(0),
        torch.empty(batch + 8, dtype=torch.int64, device=dev),
        128,
        -1,
    )
    logits = torch.randn(batch, vocab, generator=gen).to(dev)
    k = torch.full((batch,), 20, dtype=torch.int64).to(dev)
    p = torch.full((batch,), 0.9).to(dev)
    spec = Drafts(
        torch.randint(0, vocab, (n,), dtype=torch.int32, generator=gen).to(dev),
        torch.arange(drafts, n + 1, drafts, dtype=torch.int32).to(dev),
        drafts,
    )
    probs = torch.rand(n, vocab, generator=gen).softmax(-1).to(dev)
    inv_q = torch.rand(batch, vocab, generator=gen).to(dev)
    out = torch.full((batch, drafts + 1), -1, dtype=torch.int32, device=dev)
    bonus = torch.zeros(batch, dtype=torch.int64, device=dev)
    uniform = torch.rand(n, dtype=torch.float64, generator=gen).to(dev)
    greedy = torch.zeros(batch, dtype=torch.bool, device=dev)
    temps = torch.full((batch,), 0.8).to(dev)

    def rejection(ops) -> None:  # type: ignore[no-untyped-def]
        ops.expand_to_tokens(temps, spec.cu_num_drafts, n, 0, 1)
        recovered = ops.recover(spec, None, probs, inv_q)
        ops.verify_random(out, spec, None, probs, bonus, recovered, uniform, greedy)

    torch_rejection, triton_rejection = (
        TorchRejectionOps(),
        tk.TritonRejectionOps(stub, TorchRejectionOps()),
    )
    roles = {
        "slot mapping": (
            lambda: NpuSlotMapping().compute(*slot_args),
            lambda: tk.TritonSlotMapping(stub, NpuSlotMapping()).compute(*slot_args),
        ),
        "top-k/top-p": (
            lambda: apply_top_k_top_p_pytorch(logits.clone(), k, p, allow_cpu_sync=False),
            lambda: tk.TritonSamplingOps(stub, NpuSamplingOps()).top_k_top_p(logits, k, p),
        ),
        "rejection (random, 3 drafts)": (
            lambda: rejection(torch_rejection),
            lambda: rejection(triton_rejection),
        ),
    }

    def ops_of(call) -> int:  # type: ignore[no-untyped-def]
        call()  # warm (first-call allocations)
        reset_counters()
        call()
        c = counters()
        return c["fallback_ops"] + c["d2d_copies"]  # a device-side copy is a launch too

    print(f"launches per decode step, batch {batch}, vocab {vocab} (emulated npu)")
    print("| role | torch path | Triton path |")
    print("|---|---:|---:|")
    for role, (torch_call, triton_call) in roles.items():
        before = sum(stub.launches.values())
        triton_ops = ops_of(triton_call)
        kernels = (sum(stub.launches.values()) - before) // 2  # ops_of calls twice
        print(f"| {role} | {ops_of(torch_call)} | {triton_ops + kernels} |")


if __name__ == "__main__":
    main()
