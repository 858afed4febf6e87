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
