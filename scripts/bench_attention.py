"""A/B micro-benchmark (not a test): the host's decode attention and KV write, two versions.

    .venv/bin/python scripts/bench_attention.py --baseline /tmp/main-src [--dtype bfloat16]

`--baseline` is the `src/` directory of another version of this project (e.g. `git
archive main src | tar -x -C /tmp/main`); its `adapters.cpu.ops.CpuOps` is loaded
beside this tree's, and both run at the 87M model's decode shapes (12 query / 4 KV
heads of 64, block size 128, ragged context lengths around --ctx, or all equal with
--uniform; --prefill: a fresh prefill of those lengths). Calls alternate baseline,
current, baseline, ... in one process on one thread, so load on the machine slows both
alike. Printed: median microseconds per call,
their ratio, the aten ops each dispatches per call (torch.profiler; these do not move
with load) and each result's largest difference from float32 attention.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from adapters.cpu.ops import CpuOps
from adapters.torch.attention_plan import build_attention_plan

HQ, HK, D, BLOCK = 12, 4, 64, 128


def load_baseline(src: Path) -> Any:
    """CpuOps of another source tree, as module `baseline_cpu_ops` (its imports are this
    tree's: the baseline must read the same AttentionPlan, i.e. be of this tree's API)."""
    spec = importlib.util.spec_from_file_location("baseline_cpu_ops", src / "adapters/cpu/ops.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"no adapters/cpu/ops.py under {src}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CpuOps


def alternate(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median microseconds per call of each fn, the calls interleaved round-robin."""
    for fn in fns.values():
        for _ in range(5):
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) * 1e6 for name, ts in times.items()}


def aten_ops(fn: Callable[[], Any]) -> int:
    from torch.profiler import ProfilerActivity, profile

    fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))


def report(title: str, fns: dict[str, Callable[[], Any]], repeats: int,
           diffs: dict[str, float] | None = None) -> None:
    times = alternate(fns, repeats)
    print(f"{title:<28} {'us':>8} {'aten ops':>9} {'max |diff| vs fp32':>19}")
    for name, fn in fns.items():
        diff = f"{diffs[name]:>19.2e}" if diffs else ""
        print(f"  {name:<26} {times[name]:>8.1f} {aten_ops(fn):>9} {diff}")
    print(f"  baseline / current: {times['baseline'] / times['current']:.2f}x")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", type=Path, required=True, help="src/ of the other version")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--ctx", type=int, default=96, help="context length of the sequences")
    p.add_argument("--uniform", action="store_true", help="every sequence of length --ctx")
    p.add_argument("--prefill", action="store_true",
                   help="a fresh prefill of --ctx tokens per sequence instead of a decode")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=300)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    b = args.batch
    blocks_per_seq = (args.ctx + BLOCK - 1) // BLOCK
    num_blocks = b * blocks_per_seq + 4
    key_cache, value_cache = torch.randn(2, num_blocks, BLOCK, HK, D).to(dtype).unbind(0)
    table = torch.randperm(num_blocks)[: b * blocks_per_seq].view(b, -1).to(torch.int32)
    seq_lens = torch.full((b,), args.ctx, dtype=torch.int32)
    if not args.uniform:
        seq_lens[::2] -= 7  # ragged, as in a real batch
    q_lens = seq_lens if args.prefill else torch.ones(b, dtype=torch.int32)
    qsl = torch.zeros(b + 1, dtype=torch.int32)
    torch.cumsum(q_lens, 0, out=qsl[1:])
    meta = build_attention_plan(qsl, seq_lens, table, needs=CpuOps.plan_needs)
    query = torch.randn(int(qsl[-1]), HQ, D).to(dtype)
    scale = D**-0.5
    ops = {"baseline": load_baseline(args.baseline)(), "current": CpuOps()}
    outs = {name: torch.empty_like(query) for name in ops}

    exact = torch.empty(query.shape)
    CpuOps(native_attention=False).paged_attention(
        query.float(), key_cache.float(), value_cache.float(), meta,
                             scale, exact)
    attend = {
        name: (lambda o=o, out=outs[name]: o.paged_attention(  # type: ignore[misc]
            query, key_cache, value_cache, meta, scale, out))
        for name, o in ops.items()
    }
    diffs = {name: float((fn().float() - exact).abs().max()) for name, fn in attend.items()}
    print(f"{args.dtype}, batch {b}, context {args.ctx}{' (all equal)' if args.uniform else ''}, "
          f"{torch.get_num_threads()} thread(s), median us per call over {args.repeats} "
          "alternated calls")
    report(f"{'prefill' if args.prefill else 'decode'} paged_attention", attend, args.repeats,
           diffs)
    if args.prefill:
        return 0

    key = torch.randn(b, HK, D).to(dtype)
    slots = (table[:, 0].long() * BLOCK + seq_lens.long() - 1).to(torch.int64)
    write = {
        name: (lambda o=o: o.write_kv_cache(key, key, key_cache, value_cache, slots))
        for name, o in ops.items()
    }
    report("write_kv_cache", write, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
