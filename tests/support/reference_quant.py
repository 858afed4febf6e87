"""Naive versions of the quantized-matmul port's formulas, as test oracles.

Element by element in Python integers and numpy float32 scalars, so every rounding is
visible: Python's round() is half-to-even, and float32 products happen in the order the
port's docstrings write them.
"""

from __future__ import annotations

import numpy as np
import torch

F32 = np.float32


def _sat(v: int) -> int:
    return max(-128, min(127, v))


def quantize_per_token(x: torch.Tensor) -> tuple[list[list[int]], list[float]]:
    rows = x.to(torch.float32).tolist()
    q, scales = [], []
    for row in rows:
        s = F32(max(abs(F32(v)) for v in row)) / F32(127.0)
        scales.append(float(s))
        q.append([0 if s == 0 else _sat(round(float(F32(v) / s))) for v in row])
    return q, scales


def quantize_static(x: torch.Tensor, inv_scale: float, offset: float) -> list[list[int]]:
    inv, off = F32(inv_scale), F32(offset)
    return [[_sat(round(float(F32(v) * inv + off))) for v in row]
            for row in x.to(torch.float32).tolist()]


def quant_matmul(
    x_q: list[list[int]],
    weight: torch.Tensor,
    scale: list[float],
    pertoken: list[float] | None = None,
    bias: list[int] | None = None,
) -> list[list[float]]:
    w = weight.tolist()
    out = []
    for t, row in enumerate(x_q):
        line = []
        for n, wrow in enumerate(w):
            acc = sum(a * b for a, b in zip(row, wrow, strict=True))
            if bias is not None:
                acc += bias[n]
            y = F32(acc) * F32(scale[n])
            if pertoken is not None:
                y = y * F32(pertoken[t])
            line.append(float(y))
        out.append(line)
    return out
