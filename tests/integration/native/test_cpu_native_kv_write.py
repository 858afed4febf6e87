"""The native host KV write against CpuOps' index_put_ path: a copy, so the same bits."""

from __future__ import annotations

import pytest
import torch

from adapters.cpu import native
from adapters.cpu.ops import CpuOps
from support.native_kernels import built_or_skip

HK, D = 4, 64


@pytest.fixture(scope="module")
def kernel() -> native.KvWriteKernel:
    return built_or_skip(native.write_kv_cache(), "KV write", "the index_put_ path")


def _caches(blocks: int, block_size: int, dtype: torch.dtype, planes: bool) -> list[torch.Tensor]:
    """K and V caches filled with NaN (never-written rows), separate or the two planes of
    one [blocks, 2, block_size, Hk, D] allocation (strided views, as the host runner's)."""
    if planes:
        whole = torch.full((blocks, 2, block_size, HK, D), float("nan"), dtype=dtype)
        return [whole[:, 0], whole[:, 1]]
    return [torch.full((blocks, block_size, HK, D), float("nan"), dtype=dtype) for _ in "kv"]


def _write_both(
    tokens: int, slots: list[int], dtype: torch.dtype, planes: bool, slot_dtype: torch.dtype,
    block_size: int = 16, blocks: int = 6,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(len(slots) * 31 + tokens)
    # K and V as views into one qkv-like row, as the model's split hands them over.
    qkv = torch.randn(tokens, 3 * HK * D, generator=gen).to(dtype)
    key = qkv[:, HK * D : 2 * HK * D].view(tokens, HK, D)
    value = qkv[:, 2 * HK * D :].view(tokens, HK, D)
    mapping = torch.tensor(slots, dtype=slot_dtype)
    native_caches = _caches(blocks, block_size, dtype, planes)
    torch_caches = _caches(blocks, block_size, dtype, planes)
    CpuOps(native_write=True).write_kv_cache(key, value, *native_caches, mapping)
    CpuOps(native_write=False).write_kv_cache(key, value, *torch_caches, mapping)
    return native_caches, torch_caches


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))  # NaN rows compare too


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("planes", [False, True])
@pytest.mark.parametrize("slot_dtype", [torch.int64, torch.int32])
def test_native_write_equals_the_index_put_path(
    kernel: native.KvWriteKernel, dtype: torch.dtype, planes: bool, slot_dtype: torch.dtype
) -> None:
    slots = [37, 0, 95, 16, 15, 50, 81]  # across blocks, first and last offsets
    native_caches, torch_caches = _write_both(len(slots), slots, dtype, planes, slot_dtype)
    for got, want in zip(native_caches, torch_caches, strict=True):
        assert _same_bits(got, want)
    assert not torch.isnan(native_caches[0].reshape(-1, HK, D)[37]).any()  # written


def test_padding_slots_and_rows_past_the_mapping_are_skipped(
    kernel: native.KvWriteKernel,
) -> None:
    slots = [3, -1, 20, -1]  # -1: padding tokens; 2 more rows past the mapping
    native_caches, torch_caches = _write_both(6, slots, torch.bfloat16, True, torch.int64)
    for got, want in zip(native_caches, torch_caches, strict=True):
        assert _same_bits(got, want)
    flat = native_caches[0].reshape(-1, HK, D)
    assert int((~torch.isnan(flat[:, 0, 0])).sum()) == 2  # only slots 3 and 20


def test_a_slot_past_the_cache_is_an_error_not_a_stray_write(
    kernel: native.KvWriteKernel,
) -> None:
    key = torch.zeros(1, HK, D)
    caches = _caches(2, 16, torch.float32, False)
    with pytest.raises(RuntimeError, match="past the cache"):
        kernel(key, key, *caches, torch.tensor([32]))


def test_a_dtype_cast_keeps_the_index_put_path(kernel: native.KvWriteKernel) -> None:
    key = torch.zeros(1, HK, D)
    caches = _caches(2, 16, torch.bfloat16, False)
    mapping = torch.tensor([1])
    assert kernel(key, key, *caches, mapping) is False  # float32 rows, bf16 cache
    assert torch.isnan(caches[0]).all()  # nothing written
    assert kernel(key.bfloat16(), key.bfloat16(), *caches, mapping) is True
    CpuOps().write_kv_cache(key + 1, key + 1, *caches, mapping)  # cast on the torch path
    assert torch.equal(caches[0][0, 1], torch.ones(HK, D, dtype=torch.bfloat16))


def test_a_head_dim_that_is_not_contiguous_keeps_the_index_put_path(
    kernel: native.KvWriteKernel,
) -> None:
    key = torch.randn(2, D, HK).transpose(1, 2)  # [T, Hk, D] with stride(2) == HK
    native_caches = _caches(2, 16, torch.float32, False)
    torch_caches = _caches(2, 16, torch.float32, False)
    mapping = torch.tensor([4, 9])
    assert kernel(key, key, *native_caches, mapping) is False
    CpuOps().write_kv_cache(key, key, *native_caches, mapping)
    CpuOps(native_write=False).write_kv_cache(key, key, *torch_caches, mapping)
    for got, want in zip(native_caches, torch_caches, strict=True):
        assert _same_bits(got, want)
