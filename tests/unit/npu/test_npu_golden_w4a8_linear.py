"""Golden test: NpuW4A8LinearOps on the emulated torch_npu against CpuW4A8LinearOps.

The NPU path is npu_dynamic_quant, then npu_grouped_matmul's A8W4 case with the layer as
one group (cumulative group list [T]), the int4 weight repacked by
npu_convert_weight_to_int4pack, the scale as int64 float32 bits and the checkpoint's
scale_bias as bias (semantics_moe.py models the kernel's correction: products of x offset
by 8, plus the bias). Tolerance, bf16 outputs: 4 bf16 ulps of the largest output, as the
grouped W4A8 experts' golden test (the float32 sums differ from the host's
float32(x_q @ W) * scale in their last bits, then one rounding to bf16).
"""

from __future__ import annotations

import pytest
import torch

from adapters.cpu.quant_w4a8 import CpuW4A8LinearOps
from adapters.npu.quant_w4a8 import NpuW4A8LinearOps
from support.torch_npu_emulator import make_torch_npu

HOST = CpuW4A8LinearOps()


@pytest.fixture
def tnpu():
    return make_torch_npu()


@pytest.fixture
def npu(tnpu) -> NpuW4A8LinearOps:
    return NpuW4A8LinearOps(tnpu)


def _operands(gen: torch.Generator, n: int, k: int):  # type: ignore[no-untyped-def]
    values = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8)
    scale = torch.rand(n, generator=gen) * 1e-2 + 1e-4
    return values, scale, 8 * scale * values.float().sum(-1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 13])
def test_matmul_matches_the_host(npu, tnpu, dtype: torch.dtype, rows: int) -> None:
    gen = torch.Generator().manual_seed(31)
    values, scale, scale_bias = _operands(gen, 48, 64)
    x = (torch.randn(rows, 64, generator=gen) * 3).to(dtype)
    bias = torch.randn(48, generator=gen).to(dtype)
    out = npu.w4a8_matmul(x, npu.prepare_w4a8(values, scale, scale_bias), bias)
    expected = HOST.w4a8_matmul(x, HOST.prepare_w4a8(values, scale, scale_bias), bias)
    assert out.dtype == dtype and out.shape == expected.shape
    ulp = 2.0 ** -7 * expected.float().abs().max()
    assert (out.float() - expected.float()).abs().max() <= 4 * ulp
    (call,) = tnpu.calls_of("npu_grouped_matmul")
    assert call["x"][0].dtype == torch.int8 and call["weight"][0].dtype == torch.int32
    assert tuple(call["weight"][0].shape) == (1, 64, 48 // 8)
    assert call["scale"][0].dtype == torch.int64 and call["bias"][0].dtype == torch.float32
    assert call["group_list"].tolist() == [rows] and call["group_list_type"] == 0
    assert len(tnpu.calls_of("npu_convert_weight_to_int4pack")) == 1


def test_a_wrong_scale_bias_gives_wrong_outputs(npu) -> None:
    """The kernel adds scale_bias as its correction: the adapter passes the checkpoint's,
    and one that does not fit the weight moves the outputs (as it would on hardware)."""
    gen = torch.Generator().manual_seed(32)
    values, scale, scale_bias = _operands(gen, 16, 32)
    x = torch.randn(5, 32, generator=gen).to(torch.bfloat16)
    right = npu.w4a8_matmul(x, npu.prepare_w4a8(values, scale, scale_bias)).float()
    wrong = npu.w4a8_matmul(x, npu.prepare_w4a8(values, scale, scale_bias * 0)).float()
    host = HOST.w4a8_matmul(x, HOST.prepare_w4a8(values, scale, scale_bias)).float()
    ulp = 2.0 ** -7 * host.abs().max()
    assert (right - host).abs().max() <= 4 * ulp
    assert (wrong - host).abs().max() > 10 * ulp


def test_no_rows_skip_the_op(npu, tnpu) -> None:
    values, scale, scale_bias = _operands(torch.Generator().manual_seed(33), 16, 32)
    out = npu.w4a8_matmul(torch.zeros(0, 32, dtype=torch.bfloat16),
                          npu.prepare_w4a8(values, scale, scale_bias))
    assert out.shape == (0, 16) and not tnpu.calls_of("npu_grouped_matmul")


def test_sizes_the_npu_cannot_pack_are_refused(npu) -> None:
    assert npu.w4a8_refusal(48, 64) is None
    assert "multiple of 8" in (npu.w4a8_refusal(44, 64) or "")
    assert "65536" in (npu.w4a8_refusal(48, 70000) or "")


def test_a_count_list_of_one_group_is_refused_by_the_emulator(tnpu) -> None:
    """Why the adapter passes cumulative ends: the 2.14.0 docs refuse group_list_type 1
    with a list of length 1 (vllm-project/vllm-ascend's shared-expert call passes one)."""
    gen = torch.Generator().manual_seed(34)
    values, scale, scale_bias = _operands(gen, 16, 32)
    weight = tnpu.npu_convert_weight_to_int4pack(values.t().to(torch.int32).contiguous())
    scale64 = (scale.view(torch.int32).to(torch.int64) & 0xFFFFFFFF).reshape(1, 1, 16)
    x = torch.randint(-127, 128, (4, 32), generator=gen, dtype=torch.int8)
    with pytest.raises(ValueError, match="non-negative"):
        tnpu.npu_grouped_matmul(
            [x], [weight.unsqueeze(0)], bias=[scale_bias.reshape(1, 16)], scale=[scale64],
            per_token_scale=[torch.ones(4)], group_list=torch.tensor([4]), group_list_type=1,
            group_type=0, split_item=2, output_dtype=torch.bfloat16)


def test_the_traced_op_has_a_shape_only_fake_kernel(npu) -> None:
    """The linear method runs inside vLLM's compiled graph on the NPU, where Dynamo calls
    the dispatcher op's fake kernel (the wheel has a meta kernel): it gives the output
    shape without reading the group list (fake tensors hold no data), for any rows."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from support.torch_npu_emulator import dispatcher

    values, scale, scale_bias = _operands(torch.Generator().manual_seed(35), 48, 64)
    held = npu.prepare_w4a8(values, scale, scale_bias)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        x_q = mode.from_tensor(torch.zeros(7, 64, dtype=torch.int8))
        (out,) = dispatcher.traced("npu_grouped_matmul", None)(
            [x_q], [held.weight], bias=[held.scale_bias], scale=[held.scale],
            per_token_scale=[torch.ones(7)], group_list=torch.full((1,), 7),
            group_list_type=0, group_type=0, split_item=2, output_dtype=torch.bfloat16)
    assert tuple(out.shape) == (7, 48) and out.dtype == torch.bfloat16
