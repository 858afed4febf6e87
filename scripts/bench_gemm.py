"""GEMM micro-benchmark (not a test): F.linear against oneDNN, at the ~100M model's shapes.

    .venv/bin/python scripts/bench_gemm.py [--threads 2] [--dtypes float32,bfloat16]

For each linear layer of the Llama-style ~100M model (hidden 768, 12/4 heads of 64,
intermediate 2048, vocab 32000) at decode (M = 1, 16) and prefill (M = 2048) token
counts: torch.nn.functional.linear (what vLLM gives an out-of-tree platform), oneDNN on
the dense weight, and oneDNN on a weight packed once (what the host's
`host-onednn-linear` patch uses). Median ms of 30 calls after 3 warm-ups, and the
largest difference from F.linear.

`--pack-hint M` instead compares, alternated call by call on one thread, the weight
packed with no batch-size hint (what the host patch does) against packed for M rows
(`_reorder_linear_weight(w, M)`, what Inductor's own mkldnn pass does), at the 87M
model's shapes (vocab 8000).

`--small` times one decode step's GEMMs of the 87M model (12 layers' qkv, o, gate_up
and down, then the LM head: 49 calls, each weight read from memory, as in the model)
with the host's small GEMM over the dense weights (`ascend_host_native::small_gemm`,
one or two rows) against oneDNN over the packed ones and against what the host's linears
call (`ascend_host_native::packed_linear`: on AMX the bf16 tiles from one row), steps
alternated, and reports ms per step, the GB/s of weight read, and the largest difference
from a float64 sum.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

F = torch.nn.functional
SHAPES = {  # layer: (in K, out N)
    "qkv_proj": (768, 768 + 2 * 256),
    "o_proj": (768, 768),
    "gate_up_proj": (768, 2 * 2048),
    "down_proj": (2048, 768),
    "lm_head": (768, 32000),
}


def timeit(fn: Callable[[], Any], repeats: int = 30) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


SHAPES_87M = {**SHAPES, "lm_head": (768, 8000)}


def onednn(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")


def pack_hint_ab(dtypes: list[str], tokens: list[int], hint: int, repeats: int) -> None:
    """No-hint packing against packing for `hint` rows, calls alternated A, B, A, B."""
    print(f"{'dtype':<9} {'layer':<13} {'M':>5} {'no hint ms':>10} {'hint ms':>8} "
          f"{'ratio':>6} {'max |diff|':>10}")
    gen = torch.Generator().manual_seed(0)
    for dtype in (getattr(torch, d) for d in dtypes):
        for name, (k, n) in SHAPES_87M.items():
            weight = (torch.randn(n, k, generator=gen) * 0.02).to(dtype)
            plain = torch.ops.mkldnn._reorder_linear_weight(weight)
            hinted = torch.ops.mkldnn._reorder_linear_weight(weight, hint)
            for m in tokens:
                x = torch.randn(m, k, generator=gen).to(dtype)
                times: dict[str, list[float]] = {"a": [], "b": []}
                for _ in range(3):
                    onednn(x, plain), onednn(x, hinted)
                for _ in range(repeats):
                    for key, w in (("a", plain), ("b", hinted)):
                        start = time.perf_counter()
                        onednn(x, w)
                        times[key].append(time.perf_counter() - start)
                a, b = (statistics.median(times[key]) * 1e3 for key in ("a", "b"))
                diff = (onednn(x, plain).float() - onednn(x, hinted).float()).abs().max()
                print(f"{str(dtype).removeprefix('torch.'):<9} {name:<13} {m:>5} {a:>10.3f} "
                      f"{b:>8.3f} {a / b:>6.2f} {float(diff):>10.2e}", flush=True)


def small_gemm_ab(dtypes: list[str], tokens: list[int], repeats: int) -> None:
    """A decode step's 49 GEMMs: the small GEMM against oneDNN over the packs, alternated."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from adapters.cpu import native

    if native.packed_linear() is None:
        raise SystemExit("the host's native kernels did not build here (see the INFO log)")
    small = torch.ops.ascend_host_native.small_gemm
    host = torch.ops.ascend_host_native.packed_linear  # what the host's linears call
    layers = [SHAPES_87M[name] for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")]
    step = layers * 12 + [SHAPES_87M["lm_head"]]
    print(f"{'dtype':<9} {'M':>3} {'small ms':>9} {'GB/s':>6} {'oneDNN ms':>10} {'GB/s':>6} "
          f"{'speedup':>8} {'small err':>10} {'oneDNN err':>10} {'host ms':>8} {'GB/s':>6}")
    gen = torch.Generator().manual_seed(0)
    for dtype in (getattr(torch, d) for d in dtypes):
        weights = [(torch.randn(n, k, generator=gen) * 0.05).to(dtype) for k, n in step]
        packs = [torch.ops.mkldnn._reorder_linear_weight(w) for w in weights]
        size = sum(w.numel() * w.element_size() for w in weights)
        for m in tokens:
            xs = {k: torch.randn(m, k, generator=gen).to(dtype) for k, _ in step}
            err = {"small": 0.0, "onednn": 0.0}
            for (k, _), w, packed in zip(step[:4], weights[:4], packs[:4], strict=True):
                exact = xs[k].double() @ w.double().t()
                err["small"] = max(err["small"], float((small(xs[k], w, None) - exact).abs().max()))
                dnnl = onednn(xs[k], packed)
                err["onednn"] = max(err["onednn"], float((dnnl - exact).abs().max()))
            runs = {
                "small": lambda: [small(xs[k], w, None) for (k, _), w in zip(step, weights, strict=True)],  # noqa: B023, E501
                "onednn": lambda: [onednn(xs[k], p) for (k, _), p in zip(step, packs, strict=True)],  # noqa: B023
                "host": lambda: [host(xs[k], w, None) for (k, _), w in zip(step, weights, strict=True)],  # noqa: B023, E501
            }
            times: dict[str, list[float]] = {key: [] for key in runs}
            for _ in range(3):
                for run in runs.values():
                    run()
            for _ in range(repeats):
                for key, run in runs.items():
                    start = time.perf_counter()
                    run()
                    times[key].append(time.perf_counter() - start)
            a, b, h = (statistics.median(times[key]) * 1e3 for key in ("small", "onednn", "host"))
            print(f"{str(dtype).removeprefix('torch.'):<9} {m:>3} {a:>9.2f} {size / a / 1e6:>6.1f} "
                  f"{b:>10.2f} {size / b / 1e6:>6.1f} {b / a:>7.2f}x {err['small']:>10.2e} "
                  f"{err['onednn']:>10.2e} {h:>8.2f} {size / h / 1e6:>6.1f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--dtypes", default="float32,bfloat16", type=lambda s: s.split(","))
    p.add_argument("--tokens", default="1,16,2048", type=lambda s: [int(v) for v in s.split(",")])
    p.add_argument("--pack-hint", type=int, default=None,
                   help="A/B: packing without a batch-size hint against packing for M rows")
    p.add_argument("--small", action="store_true",
                   help="a decode step's GEMMs: the host's small GEMM against packed oneDNN")
    p.add_argument("--repeats", type=int, default=30)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.small:
        small_gemm_ab(args.dtypes, [m for m in args.tokens if m <= 2] or [1, 2], args.repeats)
        return 0
    if args.pack_hint is not None:
        pack_hint_ab(args.dtypes, args.tokens, args.pack_hint, args.repeats)
        return 0
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"oneDNN {torch.backends.mkldnn.is_available()}")
    hdr = (f"{'dtype':<9} {'layer':<13} {'M':>5} {'F.linear':>9} {'oneDNN':>8} "
           f"{'packed':>8} {'speedup':>8} {'max |diff|':>10}")
    print(hdr)
    print("-" * len(hdr))
    gen = torch.Generator().manual_seed(0)
    for dtype in (getattr(torch, d) for d in args.dtypes):
        for name, (k, n) in SHAPES.items():
            weight = (torch.randn(n, k, generator=gen) * 0.02).to(dtype)
            packed = torch.ops.mkldnn._reorder_linear_weight(weight)
            for m in args.tokens:
                if name == "lm_head" and m > 16:
                    continue  # vLLM computes logits for one token per sequence
                x = torch.randn(m, k, generator=gen).to(dtype)
                base = timeit(lambda: F.linear(x, weight))  # noqa: B023
                dense = timeit(lambda: onednn(x, weight))  # noqa: B023
                fast = timeit(lambda: onednn(x, packed))  # noqa: B023
                diff = (onednn(x, packed).float() - F.linear(x, weight).float()).abs().max()
                print(f"{str(dtype).removeprefix('torch.'):<9} {name:<13} {m:>5} {base:>9.3f} "
                      f"{dense:>8.3f} {fast:>8.3f} {base / fast:>7.2f}x {float(diff):>10.2e}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
