"""Golden tests: NpuInt4ExpertOps on the emulated torch_npu (npu_convert_weight_to_int4pack
per expert, npu_grouped_matmul in its antiquant mode, npu_swiglu) against CpuInt4ExpertOps
(each expert dequantized exactly, then the float grouped MLP), and the op's modelled
refusals.

Stated tolerance: each antiquantized weight is bit-identical on both sides ((q - z) is an
exact small integer times a scale already in the activations' dtype, rounded once to that
dtype), so only the GEMMs' summation (the host's CPU kernels in bf16/fp16, the emulator in
float32) may differ: the outputs agree within one ulp of the largest output (measured over
20 seeds: bf16 bit-identical, fp16 within 0.2 of that ulp).
"""

from __future__ import annotations

import attrs
import pytest
import torch

from adapters.cpu.quant_w4a16_moe import CpuInt4ExpertOps, dequantize_int4_experts
from adapters.npu.quant_w4a16_moe import NpuInt4ExpertOps
from support.torch_npu_emulator import make_torch_npu

HALF = [torch.bfloat16, torch.float16]
HOST = CpuInt4ExpertOps()
E, H, INTER = 4, 64, 32


@pytest.fixture
def tnpu():
    return make_torch_npu()


def _projection(gen: torch.Generator, out: int, inp: int, group: int | None, zero: bool,
                dtype: torch.dtype):
    groups = 1 if group is None else inp // group
    values = torch.randint(-8, 8, (E, out, inp), generator=gen, dtype=torch.int8)
    scale = (torch.rand(E, out, groups, generator=gen) * 0.05 + 0.01).to(dtype)
    zeros = torch.randint(-8, 8, (E, out, groups), generator=gen, dtype=torch.int8)
    return values, scale, zeros if zero else None


def _experts(gen: torch.Generator, group: int | None, zero: bool, dtype: torch.dtype):
    return (*_projection(gen, 2 * INTER, H, group, zero, dtype),
            *_projection(gen, H, INTER, group, zero, dtype))


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize(("group", "zero"), [(32, False), (16, True), (None, True)],
                         ids=["g32-sym", "g16-asym", "per-channel-asym"])
def test_npu_matches_the_host_twin(tnpu, dtype, group, zero) -> None:  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(5)
    weights = _experts(gen, group, zero, dtype)
    rows = torch.randn(11, H, generator=gen).to(dtype)
    sizes = torch.tensor([3, 0, 6, 2], dtype=torch.int64)  # one expert gets no rows
    npu = NpuInt4ExpertOps(tnpu)
    held = npu.prepare_int4_experts(*weights, group, dtype)
    assert not held.dense
    y = npu.grouped_mlp_w4a16(rows, sizes, held)
    host = HOST.prepare_int4_experts(*weights, group, dtype)
    assert host.dense and host.w13.dtype == dtype
    ref = HOST.grouped_mlp_w4a16(rows, sizes, host)
    assert y.dtype == ref.dtype == dtype and y.shape == (11, H)
    bound = torch.finfo(dtype).eps * float(ref.float().abs().max())
    assert float((y.float() - ref.float()).abs().max()) <= bound
    first, second = tnpu.calls_of("npu_grouped_matmul")
    assert tuple(first["weight"][0].shape) == (E, H, 2 * INTER // 8)
    assert first["weight"][0].dtype == torch.int32
    groups = 1 if group is None else H // group
    scale = first["antiquant_scale"][0]
    assert tuple(scale.shape) == ((E, 2 * INTER) if group is None else (E, groups, 2 * INTER))
    assert scale.dtype == dtype
    assert (first["antiquant_offset"] is None) == (not zero)
    assert second["output_dtype"] == dtype
    assert len(tnpu.calls_of("npu_convert_weight_to_int4pack")) == 2 * E


def test_the_dequantized_experts_are_exact_in_float32() -> None:
    gen = torch.Generator().manual_seed(6)
    values, scale, zeros, *_ = _experts(gen, 16, True, torch.float32)
    dense = dequantize_int4_experts(values, scale, zeros)
    e, o, i = 2, 5, 37
    diff = torch.tensor(float(values[e, o, i]) - float(zeros[e, o, i // 16]))
    assert float(dense[e, o, i]) == float(diff * scale[e, o, i // 16])  # one float32 product
    per_channel = dequantize_int4_experts(values, scale[:, :, :1], None)
    assert float(per_channel[e, o, i]) == float(values[e, o, i].float() * scale[e, o, 0])


def test_an_asymmetric_offset_is_the_negated_zero_point(tnpu) -> None:  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(7)
    weights = _experts(gen, 32, True, torch.bfloat16)
    held = NpuInt4ExpertOps(tnpu).prepare_int4_experts(*weights, 32, torch.bfloat16)
    zeros = weights[2]
    assert held.w13_offset is not None
    torch.testing.assert_close(held.w13_offset, (-zeros.float()).to(torch.bfloat16)
                               .transpose(1, 2))
    # A wrong offset (the zero point itself) gives other outputs: the op reads it.
    rows = torch.randn(4, H, generator=gen).to(torch.bfloat16)
    sizes = torch.tensor([1, 1, 1, 1], dtype=torch.int64)
    npu = NpuInt4ExpertOps(tnpu)
    good = npu.grouped_mlp_w4a16(rows, sizes, held)
    wrong = attrs.evolve(held, w13_offset=-held.w13_offset)
    assert not torch.allclose(npu.grouped_mlp_w4a16(rows, sizes, wrong).float(), good.float(),
                              atol=1e-2)


def _call(tnpu, x, weight, **kw):  # type: ignore[no-untyped-def]
    args = {"antiquant_scale": None, "antiquant_offset": None,
            "group_list": torch.tensor([x.shape[0]], dtype=torch.int64),
            "group_list_type": 0, "group_type": 0, "split_item": 2, **kw}
    return tnpu.npu_grouped_matmul([x], [weight], **args)


@pytest.mark.parametrize(("case", "message"), [
    ("float32 x", "x must be float16/bfloat16"),
    ("scale dtype", "antiquant_scale must have x's dtype"),
    ("scale groups", "G dividing k"),
    ("offset shape", "antiquant_offset must have antiquant_scale's shape"),
    ("output dtype", "output_dtype must be None or x's dtype"),
])
def test_the_antiquant_refusals(tnpu, case, message) -> None:  # type: ignore[no-untyped-def]
    k, n = 64, 16
    packed = tnpu.npu_convert_weight_to_int4pack(torch.zeros(k, n, dtype=torch.int32))
    weight = packed.unsqueeze(0).contiguous()
    x = torch.randn(3, k, dtype=torch.bfloat16)
    scale = torch.ones(1, 2, n, dtype=torch.bfloat16)
    kw = {"antiquant_scale": [scale]}
    if case == "float32 x":
        x = x.float()
        kw = {"antiquant_scale": [scale.float()]}
    elif case == "scale dtype":
        kw = {"antiquant_scale": [scale.to(torch.float16)]}
    elif case == "scale groups":
        kw = {"antiquant_scale": [torch.ones(1, 3, n, dtype=torch.bfloat16)]}
    elif case == "offset shape":
        kw = {**kw, "antiquant_offset": [torch.zeros(1, n, dtype=torch.bfloat16)]}
    else:
        kw = {**kw, "output_dtype": torch.float32}
    with pytest.raises(ValueError, match=message):
        _call(tnpu, x, weight, **kw)
    _call(tnpu, x.to(torch.bfloat16), weight, antiquant_scale=[scale])  # the valid call


@pytest.mark.parametrize(("args", "words"), [
    ((8, 64, 32, 32, torch.float32, False), "float16 or bfloat16 activations"),
    ((8, 64, 32, 32, torch.bfloat16, True), "expert-parallel exchange"),
    ((8, 64, 30, None, torch.bfloat16, False), "not a multiple of 8"),
    ((8, 64, 32, 48, torch.bfloat16, False), "does not divide"),
    ((2048, 64, 32, 32, torch.bfloat16, False), "at most 1024 groups"),
])
def test_npu_refusals_name_the_op_limit(tnpu, args, words) -> None:  # type: ignore[no-untyped-def]
    reason = NpuInt4ExpertOps(tnpu).int4_experts_refusal(*args)
    assert reason is not None and words in reason
    assert NpuInt4ExpertOps(tnpu).int4_experts_refusal(8, 64, 32, 32, torch.bfloat16,
                                                       False) is None


def test_the_host_serves_any_dividing_group_in_any_dtype() -> None:
    assert HOST.int4_experts_refusal(8, 64, 32, 16, torch.float32, True) is None
    assert HOST.int4_experts_refusal(8, 64, 32, None, torch.bfloat16, False) is None
    reason = HOST.int4_experts_refusal(8, 64, 32, 48, torch.float32, False)
    assert reason is not None and "does not divide" in reason
