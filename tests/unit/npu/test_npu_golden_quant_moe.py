"""Golden test: NpuQuantMoeOps on the emulated torch_npu against CpuQuantMoeOps, bit for bit.

The emulator computes npu_dynamic_quant, npu_grouped_matmul's per-token quantization case
and npu_swiglu from the 2.14.0 docs (semantics.py, semantics_moe.py), independently of the
host adapter, after binding each call to its schema. Equality is exact: integer products,
float32 scaling in one order, one rounding to the rows' dtype, swiglu in float32 on both.
"""

from __future__ import annotations

import pytest
import torch

from adapters.cpu.quant_moe import CpuQuantMoeOps
from adapters.npu.quant_moe import NpuQuantMoeOps
from support.torch_npu_emulator import make_torch_npu

HOST = CpuQuantMoeOps()


@pytest.fixture
def tnpu():
    return make_torch_npu()


@pytest.fixture
def npu(tnpu) -> NpuQuantMoeOps:
    return NpuQuantMoeOps(tnpu)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("sizes", [[4, 0, 7, 2, 1, 0, 3, 5], [0, 9]])
def test_quantized_grouped_mlp(npu, tnpu, dtype: torch.dtype, sizes: list[int]) -> None:
    gen = torch.Generator().manual_seed(12)
    experts, hidden, inter = len(sizes), 64, 32
    w13 = torch.randint(-127, 128, (experts, 2 * inter, hidden), generator=gen, dtype=torch.int8)
    w2 = torch.randint(-127, 128, (experts, hidden, inter), generator=gen, dtype=torch.int8)
    s13 = torch.rand(experts, 2 * inter, generator=gen) * 1e-3 + 1e-5
    s2 = torch.rand(experts, hidden, generator=gen) * 1e-3 + 1e-5
    rows = (torch.randn(sum(sizes), hidden, generator=gen) * 3).to(dtype)
    group_sizes = torch.tensor(sizes, dtype=torch.int64)

    out = npu.grouped_mlp_w8a8_dynamic(rows, group_sizes, *_prepared(npu, w13, s13, w2, s2))
    expected = HOST.grouped_mlp_w8a8_dynamic(rows, group_sizes, *_prepared(HOST, w13, s13, w2, s2))
    assert out.dtype == dtype and torch.equal(out, expected)
    calls = tnpu.calls_of("npu_grouped_matmul")
    assert len(calls) == 2 and len(tnpu.calls_of("npu_dynamic_quant")) == 2
    for call in calls:
        assert call["x"][0].dtype == torch.int8 and call["weight"][0].dtype == torch.int8
        assert call["per_token_scale"][0].dtype == torch.float32
        assert (call["group_list_type"], call["group_type"], call["output_dtype"]) == (
            1, 0, dtype)


def _prepared(ops, w13, s13, w2, s2):  # type: ignore[no-untyped-def]
    w13p, w2p = ops.prepare_weights(w13, w2)
    return w13p, s13, w2p, s2


def test_weights_are_held_transposed_as_int8(npu) -> None:
    w13 = torch.zeros(2, 6, 4, dtype=torch.int8)
    w2 = torch.zeros(2, 4, 3, dtype=torch.int8)
    w13p, w2p = npu.prepare_weights(w13, w2)
    assert (w13p.shape, w2p.shape) == ((2, 4, 6), (2, 3, 4))
    assert w13p.dtype == w2p.dtype == torch.int8 and w13p.is_contiguous()


# W4A8_DYNAMIC: int4 weights repacked by npu_convert_weight_to_int4pack, npu_grouped_matmul's
# A8W4 case with the scale_bias as bias. The emulator models the kernel's correction
# (products of x offset by 8, plus bias), so the float32 sums differ from the host's
# float32(x_q @ W) * scale in the last bits: tolerance, in bf16 outputs, 4 bf16 ulps of the
# largest output of the matmul, after which int8 activation rounding can flip a step.
def _int4_experts(gen: torch.Generator, experts: int, hidden: int, inter: int):  # type: ignore[no-untyped-def]
    w13 = torch.randint(-8, 8, (experts, 2 * inter, hidden), generator=gen, dtype=torch.int8)
    w2 = torch.randint(-8, 8, (experts, hidden, inter), generator=gen, dtype=torch.int8)
    s13 = torch.rand(experts, 2 * inter, generator=gen) * 1e-2 + 1e-4
    s2 = torch.rand(experts, hidden, generator=gen) * 1e-2 + 1e-4
    b13 = 8 * s13 * w13.float().sum(-1)
    b2 = 8 * s2 * w2.float().sum(-1)
    return w13, s13, b13, w2, s2, b2


@pytest.mark.parametrize("sizes", [[4, 0, 7, 2, 1, 0, 3, 5], [0, 9]])
def test_int4_grouped_mlp_matches_the_host(npu, tnpu, sizes: list[int]) -> None:
    gen = torch.Generator().manual_seed(21)
    operands = _int4_experts(gen, len(sizes), 64, 32)
    rows = (torch.randn(sum(sizes), 64, generator=gen) * 3).to(torch.bfloat16)
    group_sizes = torch.tensor(sizes, dtype=torch.int64)
    out = npu.grouped_mlp_w4a8_dynamic(rows, group_sizes, npu.prepare_int4_experts(*operands))
    expected = HOST.grouped_mlp_w4a8_dynamic(rows, group_sizes,
                                             HOST.prepare_int4_experts(*operands))
    assert out.dtype == torch.bfloat16 and out.shape == expected.shape
    ulp = 2.0 ** -7 * expected.float().abs().max()
    assert (out.float() - expected.float()).abs().max() <= 4 * ulp
    calls = tnpu.calls_of("npu_grouped_matmul")
    packs = tnpu.calls_of("npu_convert_weight_to_int4pack")
    assert len(calls) == 2 and len(packs) == 2 * len(sizes)
    for call in calls:
        assert call["weight"][0].dtype == torch.int32 and call["scale"][0].dtype == torch.int64
        assert call["bias"][0].dtype == torch.float32 and call["output_dtype"] == torch.bfloat16


def test_int4_grouped_matmul_needs_the_scale_bias(tnpu) -> None:
    """The A8W4 case without its bias is refused, and a wrong one gives wrong outputs (the
    kernel's correction), as on hardware; the adapter always passes the checkpoint's."""
    gen = torch.Generator().manual_seed(22)
    w13, s13, b13, *_ = _int4_experts(gen, 2, 64, 32)
    weight = torch.stack([tnpu.npu_convert_weight_to_int4pack(e.t().to(torch.int32).contiguous())
                          for e in w13])
    scale = (s13.view(torch.int32).to(torch.int64) & 0xFFFFFFFF).unsqueeze(1)
    x = torch.randint(-127, 128, (6, 64), generator=gen, dtype=torch.int8)
    token = torch.rand(6, generator=gen) + 0.1
    args = dict(scale=[scale], per_token_scale=[token], group_list=torch.tensor([2, 4]),
                group_list_type=1, group_type=0, split_item=2, output_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="A8W4"):
        tnpu.npu_grouped_matmul([x], [weight], **args)
    right = tnpu.npu_grouped_matmul([x], [weight], bias=[b13], **args)[0].float()
    wrong = tnpu.npu_grouped_matmul([x], [weight], bias=[torch.zeros_like(b13)], **args)[0]
    exact = torch.cat([(x[:2].long() @ w13[0].long().T).float() * s13[0],
                       (x[2:].long() @ w13[1].long().T).float() * s13[1]]) * token[:, None]
    assert torch.allclose(right, exact, rtol=2 ** -7, atol=1e-3)
    assert not torch.allclose(wrong.float(), exact, rtol=2 ** -7, atol=1e-3)
