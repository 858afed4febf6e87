"""CpuQuantOps against the element-by-element oracles of support.reference_quant."""

from __future__ import annotations

import pytest
import torch

from adapters.cpu.quant import CpuQuantOps, fp19
from support import reference_quant as ref

OPS = CpuQuantOps()


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_per_token_quantization_is_the_formula(dtype: torch.dtype, gen) -> None:
    x = (torch.randn(6, 40, generator=gen) * 3).to(dtype)
    x[2] = 0.0  # a zero row: scale 0, all zeros
    q, s = OPS.quantize_per_token(x)
    exp_q, exp_s = ref.quantize_per_token(x)
    assert q.dtype == torch.int8 and s.dtype == torch.float32
    assert q.tolist() == exp_q
    assert s.tolist() == exp_s
    assert int(q.abs().max()) == 127  # the largest magnitude of each row maps to 127


def test_half_way_values_round_to_even() -> None:
    # inv_scale 1, offset 0: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> 0, -1.5 -> -2
    x = torch.tensor([[0.5, 1.5, 2.5, -0.5, -1.5, 300.0, -300.0]])
    q = OPS.quantize_static(x, torch.tensor([1.0]), torch.tensor([0.0]))
    assert q.tolist() == [[0, 2, 2, 0, -2, 127, -128]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_static_quantization_is_the_formula(dtype: torch.dtype, gen) -> None:
    x = (torch.randn(5, 33, generator=gen) * 4).to(dtype)
    inv, off = torch.tensor([1 / 0.031]), torch.tensor([-7.0])
    got = OPS.quantize_static(x, inv, off)
    assert got.tolist() == ref.quantize_static(x, float(inv), float(off))
    assert {int(got.min()), int(got.max())} == {-128, 127}  # saturates both ways


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("per_token", [False, True])
def test_quant_matmul_is_exact_integer_math(out_dtype, per_token: bool, gen) -> None:
    t, k, n = 9, 48, 20
    x_q = torch.randint(-128, 128, (t, k), generator=gen, dtype=torch.int8)
    w = torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int8)
    scale = torch.rand(n, generator=gen) * 1e-3
    bias = None if per_token else torch.randint(-5000, 5000, (n,), generator=gen, dtype=torch.int32)
    tok = torch.rand(t, generator=gen) if per_token else None
    got = OPS.quant_matmul(x_q, OPS.prepare_weight(w), OPS.prepare_scale(scale, out_dtype),
                           out_dtype, pertoken_scale=tok, bias=bias)
    exp = ref.quant_matmul(x_q.tolist(), w, scale.tolist(),
                           None if tok is None else tok.tolist(),
                           None if bias is None else bias.tolist())
    assert got.dtype == out_dtype
    assert torch.equal(got, torch.tensor(exp, dtype=torch.float32).to(out_dtype))


def test_int32_accumulation_does_not_wrap_at_large_k(gen) -> None:
    k = 4096  # 4096 * 127 * 127 = 66e6: beyond int16 and float32's exact integers
    x_q = torch.full((2, k), 127, dtype=torch.int8)
    w = torch.full((3, k), -127, dtype=torch.int8)
    y = OPS.quant_matmul(x_q, OPS.prepare_weight(w), torch.ones(3), torch.float32)
    assert y.tolist() == [[float(-127 * 127 * k)] * 3] * 2


def test_float16_output_applies_the_scale_at_fp19() -> None:
    scale = torch.tensor([1.0 + 2**-12, 3.0])  # 2**-12 is below FP19's 10 mantissa bits
    assert fp19(scale).tolist() == [1.0, 3.0]
    got = OPS.quant_matmul(torch.tensor([[1]], dtype=torch.int8),
                           OPS.prepare_weight(torch.tensor([[100], [1]], dtype=torch.int8)),
                           OPS.prepare_scale(scale, torch.float16), torch.float16)
    assert got.tolist() == [[100.0, 3.0]]


def test_prepare_weight_refuses_float_weights() -> None:
    with pytest.raises(ValueError, match="int8"):
        OPS.prepare_weight(torch.zeros(2, 2))


@pytest.mark.parametrize("k", [1, 2, 7, 8, 9])
def test_small_inner_dimensions_are_exact(k: int, gen) -> None:
    x_q = torch.randint(-128, 128, (4, k), generator=gen, dtype=torch.int8)
    w = torch.randint(-127, 128, (3, k), generator=gen, dtype=torch.int8)
    y = OPS.quant_matmul(x_q, OPS.prepare_weight(w), torch.ones(3), torch.float32)
    assert y.tolist() == (x_q.long() @ w.long().t()).float().tolist()
