"""Golden tests: NpuWeightQuantOps (npu_weight_quant_batchmatmul on the emulated torch_npu)
against CpuWeightQuantOps, and the op's refusals where the 2.14.0 doc says the hardware
refuses.

Tolerance: both sides dequantize the int8 weight in float32 to the same x-dtype values and
sum the product in float32, but in their own order (the host reads the weight [n, k], the
NPU [k, n]); the float32 sums differ by a few ulp, which can move the one rounding to
bf16/fp16 by one ulp of the output: measured at most one output ulp (rtol 2^-7 bf16,
2^-10 fp16 covers it), and equal on most elements.
"""

from __future__ import annotations

import pytest
import torch

from adapters.cpu.weight_quant import CpuWeightQuantOps
from adapters.npu.weight_quant import NpuWeightQuantOps
from support.torch_npu_emulator import make_torch_npu

HALF = [torch.bfloat16, torch.float16]
HOST = CpuWeightQuantOps()
RTOL = {torch.bfloat16: 2**-7, torch.float16: 2**-10}


@pytest.fixture
def tnpu():
    return make_torch_npu()


@pytest.fixture
def npu(tnpu):
    return NpuWeightQuantOps(tnpu)


def _operands(seed: int = 5, t: int = 9, k: int = 96, n: int = 40):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(t, k, generator=gen)
    w = torch.randint(-128, 128, (n, k), generator=gen, dtype=torch.int8)
    scale = torch.rand(n, generator=gen) * 1e-2 + 1e-4
    zero = torch.randint(-40, 40, (n,), generator=gen).to(torch.float32)  # ModelSlim's
    bias = torch.randn(n, generator=gen)
    return x, w, scale, zero, bias


def test_the_host_is_modelslims_dequantization_in_float32() -> None:
    x, w, scale, zero, bias = _operands()
    got = HOST.weight_quant_matmul(x, *HOST.prepare_weight_only(w, scale, -zero, torch.float32),
                                   bias)
    deq = (w.to(torch.float64) - zero[:, None].double()) * scale[:, None].double()
    expected = x.double() @ deq.T + bias.double()
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("dtype", HALF)
def test_npu_matches_the_host_twin(npu, tnpu, dtype, with_bias) -> None:
    x, w, scale, zero, bias = _operands()
    x = x.to(dtype)
    b = bias if with_bias else None
    host = HOST.weight_quant_matmul(x, *HOST.prepare_weight_only(w, scale, -zero, dtype), b)
    prepared = npu.prepare_weight_only(w, scale, -zero, dtype)
    assert prepared[0].shape == (w.shape[1], w.shape[0]) and prepared[1].dtype == torch.float32
    assert torch.equal(prepared[1], scale.to(dtype).float())  # rounded to x's dtype
    got = npu.weight_quant_matmul(x, *prepared, b)
    assert got.dtype == host.dtype == dtype
    torch.testing.assert_close(got, host, rtol=RTOL[dtype], atol=1e-3)
    assert float((got == host).float().mean()) > 0.9
    call = tnpu.calls_of("npu_weight_quant_batchmatmul")[0]
    assert call["antiquant_group_size"] == 0 and call["quant_scale"] is None
    assert call["antiquant_scale"].dtype == call["antiquant_offset"].dtype == dtype
    if with_bias:
        assert call["bias"].dtype == (torch.float32 if dtype == torch.bfloat16 else dtype)


def _call(tnpu, x, w_kn, scale, offset=None, bias=None, **kw):  # type: ignore[no-untyped-def]
    return tnpu.npu_weight_quant_batchmatmul(x, w_kn, scale, offset, bias=bias, **kw)


def test_the_op_refuses_what_the_hardware_refuses(tnpu) -> None:
    x, w, scale, zero, bias = _operands()
    w_kn, xb = w.t().contiguous(), x.to(torch.bfloat16)
    s, o = scale.to(torch.bfloat16), (-zero).to(torch.bfloat16)
    with pytest.raises(ValueError, match="float16/bfloat16 only"):
        _call(tnpu, x, w_kn, scale, -zero)  # float32 activations
    with pytest.raises(ValueError, match="must be x's"):
        _call(tnpu, xb, w_kn, scale, -zero)  # float32 scale with bf16 x
    with pytest.raises(ValueError, match="must be antiquant_scale's"):
        _call(tnpu, xb, w_kn, s, -zero)
    with pytest.raises(ValueError, match=r"must be torch\.float32"):
        _call(tnpu, xb, w_kn, s, o, bias.to(torch.bfloat16))  # bf16 x takes a float32 bias
    with pytest.raises(ValueError, match="weight must be"):
        _call(tnpu, xb, w, s, o)  # [n, k], not [k, n]
    with pytest.raises(ValueError, match="per channel"):
        _call(tnpu, xb, w_kn, s[:-1], o[:-1])
    with pytest.raises(NotImplementedError, match="per-group"):
        _call(tnpu, xb, w_kn, s, o, antiquant_group_size=32)


@pytest.mark.parametrize("dtype", HALF)
def test_measured_parting_is_at_most_one_output_ulp(npu, dtype) -> None:
    """The stated tolerance, measured over a few seeds: where the two sides part, by one
    ulp of the output dtype at most."""
    for seed in range(4):
        x, w, scale, zero, bias = _operands(seed, t=17, k=160, n=48)
        x = x.to(dtype)
        host = HOST.weight_quant_matmul(x, *HOST.prepare_weight_only(w, scale, -zero, dtype),
                                        bias)
        got = npu.weight_quant_matmul(x, *npu.prepare_weight_only(w, scale, -zero, dtype), bias)
        ulp = torch.finfo(dtype).eps * host.float().abs().clamp(min=torch.finfo(dtype).tiny)
        assert bool(((got.float() - host.float()).abs() <= ulp * 1.0001).all()), seed
