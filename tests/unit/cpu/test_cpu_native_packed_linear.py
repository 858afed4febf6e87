"""The native packed GEMM against torch's own two oneDNN calls: the same bits, one pack per
weight, a repack after an in-place change, and symbolic shapes under torch.compile."""

from __future__ import annotations

import gc
import shutil
from typing import Any

import pytest
import torch

from adapters.cpu import native

F = torch.nn.functional

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN"
)


@pytest.fixture(scope="module")
def op() -> Any:
    found = native.packed_linear()
    if found is None:
        if shutil.which("c++") or shutil.which("g++"):
            pytest.fail("a C++ compiler is installed but the native GEMM did not build")
        pytest.skip("no C++ compiler: the host packs in Python")
    return found


def _dtypes() -> list[torch.dtype]:
    bf16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return [torch.float32, torch.bfloat16] if bf16 else [torch.float32]


def _torch_path(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    packed = torch.ops.mkldnn._reorder_linear_weight(weight)
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def _cache_size() -> int:
    return int(torch.ops.ascend_host_native.packed_linear_cache_size())


@pytest.mark.parametrize("dtype", _dtypes())
@pytest.mark.parametrize("rows", [(1,), (16,), (2, 5)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_the_same_bits_as_torchs_packed_linear(
    op: Any, dtype: torch.dtype, rows: tuple[int, ...], with_bias: bool
) -> None:
    gen = torch.Generator().manual_seed(len(rows) * 7 + rows[0])
    weight = (torch.randn(96, 64, generator=gen) * 0.05).to(dtype)
    bias = torch.randn(96, generator=gen).to(dtype) if with_bias else None
    x = torch.randn(*rows, 64, generator=gen).to(dtype)
    got = op(x, weight, bias)
    assert got.shape == (*rows, 96) and got.dtype == dtype
    assert torch.equal(got, _torch_path(x, weight, bias))
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(got, F.linear(x, weight, bias), **tol)


def test_one_pack_per_weight_and_a_new_one_after_an_in_place_change(op: Any) -> None:
    pack = native.pack_linear_weight()
    assert pack is not None
    weight = torch.randn(32, 16)
    x = torch.randn(3, 16)
    first = pack(weight)
    assert pack(weight) is first  # cached: the same tensor
    size = _cache_size()
    op(x, weight, None)
    assert _cache_size() == size  # the op read the pack made above
    weight.mul_(2)  # an in-place reload bumps the version counter
    assert pack(weight) is not first
    assert torch.equal(op(x, weight, None), _torch_path(x, weight, None))
    assert _cache_size() == size  # replaced, not added


def test_a_dropped_weights_pack_goes_when_the_next_is_stored(op: Any) -> None:
    weight = torch.randn(32, 16)
    op(torch.randn(1, 16), weight, None)
    size = _cache_size()
    del weight
    gc.collect()
    op(torch.randn(1, 16), torch.randn(24, 16), None)  # a new weight: dead entries dropped
    assert _cache_size() == size


def test_an_inference_tensor_is_packed_per_call_not_cached(op: Any) -> None:
    with torch.inference_mode():
        weight = torch.randn(32, 16)
        x = torch.randn(2, 16)
        size = _cache_size()
        assert torch.equal(op(x, weight, None), _torch_path(x, weight, None))
        assert _cache_size() == size


def test_under_torch_compile_the_batch_dimension_stays_symbolic(op: Any) -> None:
    """The meta kernel reads symbolic sizes: one graph serves every batch size."""
    from torch._dynamo.testing import CompileCounterWithBackend

    weight = torch.randn(48, 32)
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(lambda a: op(a, weight, None) * 2, backend=counter, dynamic=True)
    for batch in (3, 5, 9):
        x = torch.randn(batch, 32)
        assert torch.equal(compiled(x), _torch_path(x, weight, None) * 2)
    assert counter.frame_count == 1
    assert "ascend_host_native.packed_linear" in counter.graphs[0].code
