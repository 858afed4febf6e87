"""Where the plugin's time goes per engine step: timers, cProfile or torch.profiler, one per run.

    .venv/bin/python scripts/bench_profile.py --mode timers --batch 1   # wall-time breakdown
    .venv/bin/python scripts/bench_profile.py --mode cprofile           # Python functions
    .venv/bin/python scripts/bench_profile.py --mode calls --batch 1    # Python calls per step
    .venv/bin/python scripts/bench_profile.py --mode torch              # aten ops

`timers` wraps, on the live objects of this process only, the scheduler, the model
runner's phases, every linear layer, each attention impl, each method of the host
ops adapter and the frontend's output processing (detokenize), and reports inclusive
wall time per category for one timed generate. `calls` counts Python function calls
and aten ops dispatched per engine step (cProfile and torch.profiler event counts):
numbers that do not change with load on the machine, so they compare changes on a
busy box where wall time cannot.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import os
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

OPS_METHODS = ("paged_attention", "write_kv_cache", "rms_norm", "add_rms_norm",
               "rotary_embedding", "silu_and_mul")


def build(args: argparse.Namespace) -> Any:
    os.environ["VLLM_ASCEND_DEVICE"] = "cpu"
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch
    from vllm import LLM

    torch.set_num_threads(args.threads)
    return LLM(
        model=args.model, dtype=args.dtype, max_model_len=args.prompt_len + args.output_len + 16,
        max_num_seqs=args.batch, max_num_batched_tokens=max(2048, args.batch * args.prompt_len),
        kv_cache_memory_bytes=256 << 20, enable_prefix_caching=False, seed=0,
        enforce_eager=args.enforce_eager,
    )


def generate(llm: Any, args: argparse.Namespace, seed: int, max_tokens: int) -> float:
    from bench_throughput import prompts
    from vllm import SamplingParams, TokensPrompt

    batch = prompts(seed, args.batch, args.prompt_len, args.vocab)
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    start = time.perf_counter()
    llm.generate([TokensPrompt(prompt_token_ids=p) for p in batch], params, use_tqdm=False)
    return time.perf_counter() - start


class Timers:
    """Inclusive wall time and call counts per label, from wrappers set on instances."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._inside: set[str] = set()  # groups with a timed call running

    def wrap(self, obj: Any, name: str, label: str, group: str | None = None) -> None:
        """Time obj.name under `label`; within a `group`, a call made from inside another
        call of the same group is not counted again (add_rms_norm calls rms_norm)."""
        inner = getattr(obj, name)

        @functools.wraps(inner)
        def timed(*a: Any, **kw: Any) -> Any:
            if group is not None and group in self._inside:
                return inner(*a, **kw)
            if group is not None:
                self._inside.add(group)
            t0 = time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                self.seconds[label] += time.perf_counter() - t0
                self.calls[label] += 1
                if group is not None:
                    self._inside.discard(group)

        setattr(obj, name, timed)


def install_timers(llm: Any) -> Timers:
    from vllm.model_executor.layers.linear import LinearBase
    from vllm.model_executor.layers.logits_processor import LogitsProcessor

    from adapters.container import container

    t = Timers()
    core = llm.llm_engine.engine_core.engine_core
    t.wrap(core.scheduler, "schedule", "scheduler.schedule")
    t.wrap(core.scheduler, "update_from_output", "scheduler.update_from_output")
    # LLM.generate steps the in-process engine through the client's get_output.
    t.wrap(llm.llm_engine.engine_core, "get_output", "engine_core.step")
    t.wrap(llm.llm_engine.output_processor, "process_outputs", "frontend.process_outputs")
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    for name in ("execute_model", "sample_tokens", "_update_states", "_prepare_inputs",
                 "_model_forward", "_bookkeeping_sync"):
        t.wrap(runner, name, f"runner.{name}")
    t.wrap(runner.sampler, "forward", "runner.sampler")
    for module in runner.model.modules():
        if isinstance(module, LinearBase):
            t.wrap(module, "forward", "model.linear (GEMM)")
        elif isinstance(module, LogitsProcessor):
            t.wrap(module, "forward", "model.logits (lm_head)")
        impl = getattr(module, "impl", None)
        if impl is not None and hasattr(impl, "forward"):
            t.wrap(impl, "forward", "attention impl.forward")
    ops = container().ops()  # the one ops instance the layers and the backend were given
    for name in OPS_METHODS:
        t.wrap(ops, name, f"ops.{name}", group="ops")
    return t


def report_timers(t: Timers, wall: float, tokens: int) -> str:
    s = t.seconds
    ops_norm_rot_act = sum(s[f"ops.{n}"] for n in OPS_METHODS[2:])
    attention = s["attention impl.forward"]
    attn_glue = attention - s["ops.paged_attention"] - s["ops.write_kv_cache"]
    forward = s["runner._model_forward"]
    model_other = (forward - s["model.linear (GEMM)"] - attention - ops_norm_rot_act)
    # vLLM computes the logits inside execute_model, after the forward.
    execute_other = (s["runner.execute_model"] - forward - s["runner._prepare_inputs"]
                     - s["runner._update_states"] - s["model.logits (lm_head)"])
    sample_other = s["runner.sample_tokens"] - s["runner.sampler"] - s["runner._bookkeeping_sync"]
    rows = [
        ("model: linear layers (GEMMs)", s["model.linear (GEMM)"]),
        ("ours: ops.paged_attention", s["ops.paged_attention"]),
        ("ours: ops.write_kv_cache", s["ops.write_kv_cache"]),
        ("ours: attention impl glue (views, split)", attn_glue),
        ("ours: ops rms_norm/add_rms_norm/rotary/silu", ops_norm_rot_act),
        ("model: rest of forward (embed, glue, dispatch)", model_other),
        ("model: logits (lm_head)", s["model.logits (lm_head)"]),
        ("runner: _prepare_inputs (incl. our metadata)", s["runner._prepare_inputs"]),
        ("runner: _update_states", s["runner._update_states"]),
        ("runner: rest of execute_model", execute_other),
        ("runner: sampler", s["runner.sampler"]),
        ("runner: _bookkeeping_sync", s["runner._bookkeeping_sync"]),
        ("runner: rest of sample_tokens", sample_other),
        ("engine: scheduler.schedule", s["scheduler.schedule"]),
        ("engine: scheduler.update_from_output", s["scheduler.update_from_output"]),
        ("engine: rest of EngineCore.step", s["engine_core.step"] - s["runner.execute_model"]
         - s["runner.sample_tokens"] - s["scheduler.schedule"]
         - s["scheduler.update_from_output"]),
        ("frontend: output processing (detokenize)", s["frontend.process_outputs"]),
        ("frontend: rest of LLM.generate", wall - s["engine_core.step"]
         - s["frontend.process_outputs"]),
    ]
    out = io.StringIO()
    out.write(f"timed generate: {wall:.2f} s, {tokens} output tokens, {tokens / wall:.1f} tok/s, "
              f"{t.calls['engine_core.step']} engine steps\n")
    steps = max(t.calls["engine_core.step"], 1)
    out.write(f"{'where':<50} {'s':>7} {'%':>6} {'ms/step':>8}\n")
    for label, sec in rows:
        out.write(f"{label:<50} {sec:>7.2f} {100 * sec / wall:>5.1f}% "
                  f"{1000 * sec / steps:>8.2f}\n")
    out.write("\ncalls: " + ", ".join(f"{k}={v}" for k, v in sorted(t.calls.items())) + "\n")
    return out.getvalue()


def report_calls(llm: Any, args: argparse.Namespace) -> str:
    """Python calls and aten ops per decode step, from one timed generate of each kind."""
    from torch.profiler import ProfilerActivity, profile

    steps = args.output_len  # one prefill step, then output_len - 1 decode steps
    prof = cProfile.Profile()
    prof.enable()
    generate(llm, args, seed=0, max_tokens=args.output_len)
    prof.disable()
    stats = pstats.Stats(prof)
    total_calls = sum(v[1] for v in stats.stats.values())  # type: ignore[attr-defined]
    by_file: dict[str, int] = defaultdict(int)
    for (filename, _, _), v in stats.stats.items():  # type: ignore[attr-defined]
        by_file[_area(filename)] += v[1]
    with profile(activities=[ProfilerActivity.CPU]) as tprof:
        generate(llm, args, seed=0, max_tokens=args.output_len)
    events = [e for e in tprof.key_averages() if e.key.startswith("aten::")]
    aten = sum(e.count for e in events)
    out = io.StringIO()
    out.write(f"batch {args.batch}, {steps} engine steps per generate\n")
    out.write(f"Python function calls per step: {total_calls / steps:.0f}\n")
    out.write(f"aten ops dispatched per step (incl. nested): {aten / steps:.0f}\n")
    out.write("Python calls per step by area:\n")
    for area, n in sorted(by_file.items(), key=lambda kv: -kv[1])[:args.top]:
        out.write(f"  {area:<50} {n / steps:>8.0f}\n")
    out.write("Python functions with the most calls per step:\n")
    funcs = sorted(stats.stats.items(), key=lambda kv: -kv[1][1])  # type: ignore[attr-defined]
    for (filename, line, name), v in funcs[:args.top]:
        out.write(f"  {v[1] / steps:>7.1f}  {name} ({_area(filename)}:{line})\n")
    out.write("aten ops with the most calls per step:\n")
    for e in sorted(events, key=lambda e: -e.count)[:args.top]:
        out.write(f"  {e.count / steps:>7.1f}  {e.key}\n")
    return out.getvalue()


def _area(filename: str) -> str:
    """A source file as its package area: vllm/v1/core, adapters/cpu, torch/nn, ..."""
    parts = Path(filename).parts
    for base in ("site-packages", "src"):
        if base in parts:
            i = parts.index(base) + 1
            return "/".join(parts[i : min(i + 3, len(parts) - 1)]) or parts[-1]
    return parts[-1] if parts else filename


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("timers", "cprofile", "calls", "torch"), default="timers")
    p.add_argument("--model", default=str(ROOT / "models" / "100m-llama"))
    p.add_argument("--dtype", default="float32")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--enforce-eager", action="store_true",
                   help="every op eagerly (default: the host's compiled path)")
    args = p.parse_args(argv)

    from transformers import AutoConfig

    args.vocab = int(AutoConfig.from_pretrained(args.model).vocab_size)
    llm = build(args)
    generate(llm, args, seed=1, max_tokens=8)  # warm-up, other prompts
    tokens = args.batch * args.output_len
    if args.mode == "timers":
        timers = install_timers(llm)
        wall = generate(llm, args, seed=0, max_tokens=args.output_len)
        print(report_timers(timers, wall, tokens))
    elif args.mode == "cprofile":
        prof = cProfile.Profile()
        prof.enable()
        wall = generate(llm, args, seed=0, max_tokens=args.output_len)
        prof.disable()
        print(f"timed generate under cProfile: {wall:.2f} s")
        for key in ("tottime", "cumulative"):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(args.top)
            print(buf.getvalue())
    elif args.mode == "calls":
        print(report_calls(llm, args))
    else:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            wall = generate(llm, args, seed=0, max_tokens=args.output_len)
        print(f"timed generate under torch.profiler: {wall:.2f} s")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
