"""Golden tests: NpuQuantOps on the emulated torch_npu against CpuQuantOps, bit for bit.

The emulator computes each quant op from its 2.14.0 doc (tests/support/torch_npu_emulator/
semantics.py), independently of CpuQuantOps, after binding the call to the op's schema.
Equality is exact: both sides are integer math plus float32 products in one order.
"""

from __future__ import annotations

import pytest
import torch

from adapters.cpu.quant import CpuQuantOps
from adapters.npu.quant import NpuQuantOps
from support.torch_npu_emulator import make_torch_npu

HALF = [torch.bfloat16, torch.float16]
HOST = CpuQuantOps()


@pytest.fixture
def tnpu():
    return make_torch_npu()


@pytest.fixture
def npu(tnpu):
    return NpuQuantOps(tnpu)


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(11)


@pytest.mark.parametrize("dtype", HALF)
def test_per_token_quantization(npu, tnpu, dtype, gen) -> None:
    x = (torch.randn(7, 64, generator=gen) * 5).to(dtype)
    x[3] = 0
    q, s = npu.quantize_per_token(x)
    q_ref, s_ref = HOST.quantize_per_token(x)
    assert torch.equal(q, q_ref) and torch.equal(s, s_ref)
    assert tnpu.calls_of("npu_dynamic_quant")[0]["dst_type"] is torch.int8


@pytest.mark.parametrize("dtype", HALF)
def test_static_quantization(npu, tnpu, dtype, gen) -> None:
    x = (torch.randn(6, 48, generator=gen) * 3).to(dtype)
    inv, off = torch.tensor([1 / 0.017], dtype=dtype), torch.tensor([5.0], dtype=dtype)
    assert torch.equal(npu.quantize_static(x, inv, off), HOST.quantize_static(x, inv, off))
    call = tnpu.calls_of("npu_quantize")[0]
    assert (call["dtype"], call["axis"], call["div_mode"]) == (torch.qint8, -1, False)


def _operands(gen: torch.Generator, t: int = 9, k: int = 64, n: int = 24):
    x_q = torch.randint(-128, 128, (t, k), generator=gen, dtype=torch.int8)
    w = torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int8)
    scale = torch.rand(n, generator=gen) * 1e-3 + 1e-5
    return x_q, w, scale


@pytest.mark.parametrize("out_dtype", HALF)
def test_static_matmul_with_quant_bias(npu, tnpu, out_dtype, gen) -> None:
    x_q, w, scale = _operands(gen)
    bias = torch.randint(-9000, 9000, (w.shape[0],), generator=gen, dtype=torch.int32)
    got = npu.quant_matmul(x_q, npu.prepare_weight(w), npu.prepare_scale(scale, out_dtype),
                           out_dtype, bias=bias)
    ref = HOST.quant_matmul(x_q, HOST.prepare_weight(w), HOST.prepare_scale(scale, out_dtype),
                            out_dtype, bias=bias)
    assert got.dtype == out_dtype and torch.equal(got, ref)
    # fp16 output takes the int64 scale of npu_trans_quant_param; bf16 the float32 one.
    packed = [c["scale"].dtype for c in tnpu.calls_of("npu_quant_matmul")]
    assert packed == [torch.int64 if out_dtype == torch.float16 else torch.float32]
    assert tnpu.calls_of("npu_quant_matmul")[0]["x2"].shape == (64, 24)  # [k, n]


@pytest.mark.parametrize("out_dtype", HALF)
def test_dynamic_matmul_with_per_token_scale(npu, out_dtype, gen) -> None:
    x = (torch.randn(5, 64, generator=gen) * 2).to(out_dtype)
    _, w, scale = _operands(gen)
    q, s = npu.quantize_per_token(x)
    got = npu.quant_matmul(q, npu.prepare_weight(w), scale, out_dtype, pertoken_scale=s)
    q_ref, s_ref = HOST.quantize_per_token(x)
    ref = HOST.quant_matmul(q_ref, HOST.prepare_weight(w), scale, out_dtype,
                            pertoken_scale=s_ref)
    assert torch.equal(got, ref)


def test_the_npu_path_refuses_float32_activations(npu) -> None:
    with pytest.raises(ValueError, match="fp16/bf16 only"):
        npu.quantize_per_token(torch.randn(2, 8))


def test_trans_quant_param_keeps_fp19(tnpu) -> None:
    packed = tnpu.npu_trans_quant_param(torch.tensor([1.0 + 2**-12, 0.5]), None)
    assert packed.dtype == torch.int64
    assert packed.to(torch.int32).view(torch.float32).tolist() == [1.0, 0.5]
