"""CpuW4A8LinearOps against the element-by-element oracle of support.reference_quant:
per-token int8 activations, exact int8 x int4 products, the per-channel scale then the
token's, one rounding to the activations' dtype."""

from __future__ import annotations

import pytest
import torch

from adapters.cpu.quant_w4a8 import CpuW4A8LinearOps
from support import reference_quant as ref

OPS = CpuW4A8LinearOps()
F32 = torch.float32


def _operands(gen: torch.Generator, n: int = 24, k: int = 40):  # type: ignore[no-untyped-def]
    values = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
    scale = torch.rand(n, generator=gen) * 1e-2 + 1e-4
    return values, scale, 8 * scale * values.float().sum(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matmul_is_the_oracle_bit_for_bit(dtype: torch.dtype, with_bias: bool) -> None:
    gen = torch.Generator().manual_seed(3)
    values, scale, scale_bias = _operands(gen)
    x = (torch.randn(7, 40, generator=gen) * 2).to(dtype)
    x[3] = 0  # a row of zeros: scale 0, products 0
    bias = (torch.randn(24, generator=gen)).to(dtype) if with_bias else None
    weight = OPS.prepare_w4a8(values, scale, scale_bias)
    out = OPS.w4a8_matmul(x, weight, bias)
    x_q, s = ref.quantize_per_token(x)
    expected = torch.tensor(ref.quant_matmul(x_q, values, scale.tolist(), s), dtype=F32)
    expected = expected.to(dtype)
    if bias is not None:
        expected = expected + bias
    assert out.dtype == dtype and torch.equal(out, expected)
    assert (weight.n, weight.k) == (24, 40) and weight.weight.dtype == torch.int8


def test_no_rows_give_no_rows() -> None:
    values, scale, scale_bias = _operands(torch.Generator().manual_seed(4))
    out = OPS.w4a8_matmul(torch.zeros(0, 40), OPS.prepare_w4a8(values, scale, scale_bias))
    assert out.shape == (0, 24)


def test_values_outside_int4_are_refused() -> None:
    values, scale, scale_bias = _operands(torch.Generator().manual_seed(5))
    values[2, 3] = 8
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        OPS.prepare_w4a8(values, scale, scale_bias)
    assert OPS.w4a8_refusal(6, 10) is None  # the host serves any (even) size
