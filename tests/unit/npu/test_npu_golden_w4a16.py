"""Golden tests: NpuInt4WeightOps on the emulated torch_npu (npu_convert_weight_to_int4pack,
npu_weight_quant_batchmatmul) against CpuInt4WeightOps, and the op's modelled refusals.

Stated tolerance: the antiquantized weight is bit-identical on both sides ((q - z) is an
exact small integer and the scale is already in the activations' dtype, as vLLM's
parameters hold it), so only the GEMM's float32 summation order may differ: the outputs
agree within one bf16/fp16 rounding of the result (rtol 2^-7, atol 1e-3 on O(1) values).
"""

from __future__ import annotations

import pytest
import torch

from adapters.cpu.quant_w4a16 import CpuInt4WeightOps, dequantize_int4
from adapters.npu.quant_w4a16 import NpuInt4WeightOps
from support.torch_npu_emulator import make_torch_npu

HALF = [torch.bfloat16, torch.float16]
HOST = CpuInt4WeightOps()
RTOL, ATOL = 2.0**-7, 1e-3


@pytest.fixture
def tnpu():
    return make_torch_npu()


def _layer(gen: torch.Generator, n: int, k: int, group: int, zero: bool, dtype: torch.dtype):
    values = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
    scale = (torch.rand(n, k // group, generator=gen) * 0.02 + 0.001).to(dtype)
    zeros = torch.randint(-8, 8, (n, k // group), generator=gen, dtype=torch.int8)
    return values, scale, zeros if zero else None


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize(("group", "zero"), [(32, False), (64, True), (128, True)],
                         ids=["g32-sym", "g64-asym", "per-channel-asym"])
def test_npu_matches_the_host_twin(tnpu, dtype, group, zero) -> None:  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(3)
    n, k = 48, 128
    values, scale, zeros = _layer(gen, n, k, group, zero, dtype)
    x = torch.randn(7, k, generator=gen).to(dtype)
    bias = torch.randn(n, generator=gen).to(dtype)
    npu = NpuInt4WeightOps(tnpu)
    held = npu.prepare_int4(values, scale, zeros, group, dtype)
    y = npu.int4_matmul(x, held, bias)
    ref = HOST.int4_matmul(x, HOST.prepare_int4(values, scale, zeros, group, dtype), bias)
    assert y.dtype == ref.dtype == dtype
    torch.testing.assert_close(y.float(), ref.float(), rtol=RTOL, atol=ATOL)
    call = tnpu.calls_of("npu_weight_quant_batchmatmul")[0]
    assert call["antiquant_group_size"] == (0 if group == k else group)
    assert (call["antiquant_offset"] is None) == (not zero)
    assert call["bias"].dtype == (torch.float32 if dtype == torch.bfloat16 else torch.float16)
    assert tuple(call["weight"].shape) == (k, n // 8) and call["weight"].dtype == torch.int32


def test_the_dequantized_weight_is_exact_in_float32() -> None:
    gen = torch.Generator().manual_seed(4)
    values, scale, zeros = _layer(gen, 16, 64, 32, True, torch.float32)
    w = dequantize_int4(values, scale, zeros, 32)
    assert zeros is not None
    expected = [[(int(values[o, i]) - int(zeros[o, i // 32])) * float(scale[o, i // 32])
                 for i in range(64)] for o in range(16)]
    assert torch.equal(w, torch.tensor(expected, dtype=torch.float32))


def test_the_device_refuses_what_the_op_does_not_take(tnpu) -> None:  # type: ignore[no-untyped-def]
    npu = NpuInt4WeightOps(tnpu)
    assert npu.int4_refusal(48, 128, 64) is None and npu.int4_refusal(48, 128, 128) is None
    assert "multiple of 32" in (npu.int4_refusal(48, 128, 16) or "")
    assert "multiple of 32" in (npu.int4_refusal(48, 96, 48) or "")
    assert "multiple of 8" in (npu.int4_refusal(44, 128, 32) or "")
    assert HOST.int4_refusal(48, 128, 16) is None
    assert "does not divide" in (HOST.int4_refusal(48, 100, 32) or "")


def test_the_emulated_op_refuses_as_the_docs_say(tnpu) -> None:  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(5)
    values, scale, _ = _layer(gen, 16, 64, 32, False, torch.bfloat16)
    packed = tnpu.npu_convert_weight_to_int4pack(values.t().to(torch.int32).contiguous())
    x = torch.randn(3, 64, generator=gen).to(torch.bfloat16)
    s = scale.t().contiguous()
    with pytest.raises(ValueError, match="float16/bfloat16"):  # no float32 activations
        tnpu.npu_weight_quant_batchmatmul(x.float(), packed, s.float(), antiquant_group_size=32)
    with pytest.raises(ValueError, match="x's dtype"):
        tnpu.npu_weight_quant_batchmatmul(x, packed, s.half(), antiquant_group_size=32)
    with pytest.raises(ValueError, match=r"\[32, K - 1\]"):  # one group of all K
        tnpu.npu_weight_quant_batchmatmul(x, packed, s[:1], antiquant_group_size=64)
    with pytest.raises(ValueError, match=r"bias must be torch\.float32"):
        tnpu.npu_weight_quant_batchmatmul(
            x, packed, s, bias=torch.zeros(16, dtype=torch.bfloat16), antiquant_group_size=32)
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        tnpu.npu_convert_weight_to_int4pack(torch.full((4, 8), 8, dtype=torch.int32))
    with pytest.raises(ValueError, match="multiple of 8"):
        tnpu.npu_convert_weight_to_int4pack(torch.zeros(4, 12, dtype=torch.int32))
    # int8 weights go to the W8A16 model (semantics_weight_quant), per channel only.
    with pytest.raises(NotImplementedError, match="per-group"):
        tnpu.npu_weight_quant_batchmatmul(x, values.t().contiguous(), s, antiquant_group_size=32)
