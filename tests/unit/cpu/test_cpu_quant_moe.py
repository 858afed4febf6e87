"""CpuQuantMoeOps against the element-by-element oracles of support.reference_quant, group
by group: per-token quantization before each grouped matmul, exact int32 products."""

from __future__ import annotations

import pytest
import torch

from adapters.cpu.quant_moe import CpuQuantMoeOps
from support import reference_quant as ref

OPS = CpuQuantMoeOps()
F32 = torch.float32


def _expert_mlp(x: torch.Tensor, w13: torch.Tensor, s13: torch.Tensor, w2: torch.Tensor,
                s2: torch.Tensor) -> torch.Tensor:
    """One expert's rows through the W8A8_DYNAMIC formulas (oracle; silu from torch)."""
    x_q, s = ref.quantize_per_token(x)
    gate_up = torch.tensor(ref.quant_matmul(x_q, w13, s13.tolist(), s), dtype=F32).to(x.dtype)
    inter = w2.shape[1]
    wide = gate_up.to(F32)
    act = (torch.nn.functional.silu(wide[:, :inter]) * wide[:, inter:]).to(x.dtype)
    a_q, sa = ref.quantize_per_token(act)
    return torch.tensor(ref.quant_matmul(a_q, w2, s2.tolist(), sa), dtype=F32).to(x.dtype)


def _operands(
    gen: torch.Generator, experts: int = 4, hidden: int = 24, inter: int = 10,
    bits: int = 8, scale: float = 1e-2,
):
    """Weights in the signed range of `bits` (int8: [-127, 127]; int4: [-8, 7]) and their
    per-channel scales."""
    low, high = (-127, 128) if bits == 8 else (-8, 8)
    w13 = torch.randint(low, high, (experts, 2 * inter, hidden), generator=gen, dtype=torch.int8)
    w2 = torch.randint(low, high, (experts, hidden, inter), generator=gen, dtype=torch.int8)
    s13 = torch.rand(experts, 2 * inter, generator=gen) * scale + scale / 100
    s2 = torch.rand(experts, hidden, generator=gen) * scale + scale / 100
    return w13, s13, w2, s2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_each_group_is_its_experts_integer_math(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(3)
    w13, s13, w2, s2 = _operands(gen)
    sizes = [3, 0, 5, 1]  # an expert with no rows
    rows = (torch.randn(sum(sizes), w13.shape[2], generator=gen) * 2).to(dtype)
    rows[4] = 0.0  # a zero row: scale 0, output 0
    w13p, w2p = OPS.prepare_weights(w13, w2)
    out = OPS.grouped_mlp_w8a8_dynamic(rows, torch.tensor(sizes), w13p, s13, w2p, s2)
    assert out.dtype == dtype and out.shape == rows.shape
    start = 0
    for e, n in enumerate(sizes):
        if n:
            expected = _expert_mlp(rows[start:start + n], w13[e], s13[e], w2[e], s2[e])
            assert torch.equal(out[start:start + n], expected), e
        start += n
    assert not out[4].any()


def test_no_rows_gives_no_rows() -> None:
    w13, s13, w2, s2 = _operands(torch.Generator().manual_seed(4))
    rows = torch.zeros(0, w13.shape[2])
    out = OPS.grouped_mlp_w8a8_dynamic(rows, torch.zeros(4, dtype=torch.int64), w13, s13, w2, s2)
    assert out.shape == (0, w13.shape[2])


def test_float_weights_are_refused() -> None:
    w13, _, w2, _ = _operands(torch.Generator().manual_seed(5))
    with pytest.raises(ValueError, match=r"w13 must be int8 \[E, out, in\], not torch.float32"):
        OPS.prepare_weights(w13.float(), w2)


# W4A8_DYNAMIC: the same oracle with int4 values [-8, 7] as the weights (exact in int32).
def _int4_operands(gen: torch.Generator):
    return _operands(gen, bits=4, scale=1e-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int4_groups_are_their_experts_integer_math(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(6)
    w13, s13, w2, s2 = _int4_operands(gen)
    sizes = [2, 4, 0, 3]
    rows = (torch.randn(sum(sizes), w13.shape[2], generator=gen) * 2).to(dtype)
    b13 = 8 * s13 * w13.float().sum(-1)
    b2 = 8 * s2 * w2.float().sum(-1)
    held = OPS.prepare_int4_experts(w13, s13, b13, w2, s2, b2)
    out = OPS.grouped_mlp_w4a8_dynamic(rows, torch.tensor(sizes), held)
    assert out.dtype == dtype and out.shape == rows.shape
    start = 0
    for e, n in enumerate(sizes):
        if n:
            expected = _expert_mlp(rows[start:start + n], w13[e], s13[e], w2[e], s2[e])
            assert torch.equal(out[start:start + n], expected), e
        start += n


def test_int4_values_outside_the_range_are_refused() -> None:
    w13, s13, w2, s2 = _int4_operands(torch.Generator().manual_seed(7))
    w2[1, 0, 0] = 9
    with pytest.raises(ValueError, match=r"w2 holds values outside \[-8, 7\]"):
        OPS.prepare_int4_experts(w13, s13, s13, w2, s2, s2)
