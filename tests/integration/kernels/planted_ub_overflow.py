"""A planted kernel for the lowering check: one tile of 131072 float32 (512 KiB) held in
the unified buffer (192 KiB on Ascend910B and A3), so bishengir-compile must refuse it."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def oversized_copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=mask) * 2.0, mask=mask)


LOWERING_CASES = [
    (
        "planted_ub_overflow",
        oversized_copy,
        {"src": "*fp32", "dst": "*fp32", "n": "i32", "BLOCK": "constexpr"},
        {"BLOCK": 131072},
    )
]
