"""Micro-benchmark of the host ops adapter at the 100M model's decode shapes, with candidates.

    .venv/bin/python scripts/bench_ops.py [--batch 16] [--ctx 192] [--threads 2]

Each row: the current `CpuOps` method, then a candidate written here (not in src/)
that computes the same result; the max abs difference is printed so a candidate is
only a suggestion when it agrees. Times are medians per call over many calls.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from adapters.cpu.ops import CpuOps
from adapters.cpu.reference_ops import _context_slots
from adapters.torch.attention_plan import build_attention_plan

HQ, HK, D, HIDDEN, INTER, BLOCK = 12, 4, 64, 768, 2048, 128


def timeit(fn: Callable[[], Any], repeats: int) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6  # microseconds


def decode_sdpa_blocks(query, key_cache, value_cache, meta, scale):  # type: ignore[no-untyped-def]
    """Candidate decode: gather whole blocks (no per-token slots), one SDPA, GQA in query rows.

    Unused cache rows of the gathered tail blocks may hold NaN: masked scores do not
    protect against NaN * 0, so invalid K/V rows are zeroed after the gather. Measured
    (1 thread, 16 seqs): slower than the per-token gather at 192 (pads to 256 rows), even
    at 512; the per-token gather plus the same folded SDPA is what CpuOps does.
    """
    b = meta.seq_lens.shape[0]
    nb = (meta.max_seq_len + BLOCK - 1) // BLOCK
    blocks = meta.block_table[:, :nb].reshape(-1).long()
    k = key_cache.index_select(0, blocks).view(b, nb * BLOCK, HK * D)
    v = value_cache.index_select(0, blocks).view(b, nb * BLOCK, HK * D)
    valid = torch.arange(nb * BLOCK)[None, :] < meta.seq_lens[:, None]
    k.masked_fill_(~valid[:, :, None], 0.0)
    v.masked_fill_(~valid[:, :, None], 0.0)
    q = query.view(b, HK, HQ // HK, D)
    out = F.scaled_dot_product_attention(
        q,
        k.view(b, nb * BLOCK, HK, D).transpose(1, 2),
        v.view(b, nb * BLOCK, HK, D).transpose(1, 2),
        attn_mask=valid[:, None, None, :],
        scale=scale,
    )
    return out.reshape(b, HQ, D)


def rotate_no_clone(positions, q, k, cos_sin_cache):  # type: ignore[no-untyped-def]
    """Candidate rotary for rotary_dim == head_size, neox style: no clone, no slice-assign."""
    cos, sin = cos_sin_cache.index_select(0, positions).chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)

    def rot(x):  # type: ignore[no-untyped-def]
        h = x.view(x.shape[0], -1, D)
        x1, x2 = h.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).view(x.shape)

    return rot(q), rot(k)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--ctx", type=int, default=192, help="context length of every sequence")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--repeats", type=int, default=200)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ops = CpuOps()
    b, n = args.batch, args.repeats
    rows: list[tuple[str, float, float, float]] = []

    # Attention: caches as the backend hands them, a contiguous K plane and V plane
    # (the K/V slot is outermost in memory, see adapters/vllm/attention/backend.py).
    blocks_per_seq = (args.ctx + BLOCK - 1) // BLOCK
    key_cache, value_cache = torch.randn(2, b * blocks_per_seq + 4, BLOCK, HK, D).unbind(0)
    block_table = torch.randperm(b * blocks_per_seq + 4)[: b * blocks_per_seq].view(b, -1)
    block_table = block_table.to(torch.int32)
    seq_lens = torch.full((b,), args.ctx, dtype=torch.int32)
    seq_lens[::2] -= 7  # ragged, as in a real batch
    meta = build_attention_plan(
        torch.arange(b + 1, dtype=torch.int32), seq_lens, block_table, needs=CpuOps.plan_needs
    )
    query = torch.randn(b, HQ, D)
    out = torch.empty(b, HQ, D)
    scale = D**-0.5
    ref = ops.paged_attention(query, key_cache, value_cache, meta, scale, out).clone()
    cand = decode_sdpa_blocks(query, key_cache, value_cache, meta, scale)
    rows.append((
        "paged_attention decode",
        timeit(lambda: ops.paged_attention(query, key_cache, value_cache, meta, scale, out), n),
        timeit(lambda: decode_sdpa_blocks(query, key_cache, value_cache, meta, scale), n),
        float((ref - cand).abs().max()),
    ))
    bt, sl = block_table.long(), seq_lens.long()
    rows.append(("  of which _context_slots (per layer)",
                 timeit(lambda: _context_slots(bt, sl, BLOCK), n), 0.0, 0.0))

    x = torch.randn(b, HIDDEN)
    res = torch.randn(b, HIDDEN)
    w = torch.randn(HIDDEN)
    rows.append((
        "rms_norm [B,768]",
        timeit(lambda: ops.rms_norm(x, w, 1e-6), n),
        timeit(lambda: F.rms_norm(x, (HIDDEN,), w, 1e-6), n),
        float((ops.rms_norm(x, w, 1e-6) - F.rms_norm(x, (HIDDEN,), w, 1e-6)).abs().max()),
    ))

    def add_norm() -> Any:
        s = x + res
        return F.rms_norm(s, (HIDDEN,), w, 1e-6), s

    rows.append((
        "add_rms_norm [B,768]",
        timeit(lambda: ops.add_rms_norm(x, res, w, 1e-6), n),
        timeit(add_norm, n),
        float((ops.add_rms_norm(x, res, w, 1e-6)[0] - add_norm()[0]).abs().max()),
    ))

    positions = torch.randint(0, 256, (b,))
    cache = torch.randn(8192, D)
    q = torch.randn(b, HQ * D)
    k = torch.randn(b, HK * D)
    cur = ops.rotary_embedding(positions, q, k, cache, D, D, True)
    new = rotate_no_clone(positions, q, k, cache)
    rows.append((
        "rotary_embedding q+k (neox, full dim)",
        timeit(lambda: ops.rotary_embedding(positions, q, k, cache, D, D, True), n),
        timeit(lambda: rotate_no_clone(positions, q, k, cache), n),
        float(max((cur[0] - new[0]).abs().max(), (cur[1] - new[1]).abs().max())),
    ))
    gate_up = torch.randn(b, 2 * INTER)
    rows.append(("silu_and_mul [B,4096]", timeit(lambda: ops.silu_and_mul(gate_up), n), 0.0, 0.0))

    print(f"batch {b}, context {args.ctx}, torch threads {torch.get_num_threads()}, "
          f"median microseconds per call over {n} calls")
    print(f"{'op':<40} {'current us':>11} {'candidate us':>13} {'speedup':>8} {'max diff':>9}")
    for name, cur_us, cand_us, diff in rows:
        speed = f"{cur_us / cand_us:.2f}x" if cand_us else "-"
        cand = f"{cand_us:.1f}" if cand_us else "-"
        print(f"{name:<40} {cur_us:>11.1f} {cand:>13} {speed:>8} {diff:>9.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
