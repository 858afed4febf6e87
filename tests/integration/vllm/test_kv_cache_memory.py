"""KV-cache sizing on the host: the flags are honoured, and a cache too small for one
sequence of max_model_len fails with the numbers and the flag to change."""

from __future__ import annotations

import pytest

from adapters.vllm.worker.kv_cache_bytes import kv_cache_budget
from ascend_core.errors import ConfigError
from ascend_core.memory_budget import KvCacheTooSmallError
from ports.runtime import MemoryInfo

GIB = 1 << 30
HOST = MemoryInfo(free_bytes=20 * GIB, total_bytes=24 * GIB, peak_allocated_bytes=2 * GIB)


def test_explicit_bytes_win() -> None:
    budget = kv_cache_budget(HOST, 0.9, 3 * GIB, one_sequence_bytes=1 << 20, max_model_len=512)
    assert budget.kv_cache_bytes == 3 * GIB
    assert "--kv-cache-memory-bytes" in budget.reason


def test_utilization_is_a_fraction_of_host_memory_minus_what_the_process_holds() -> None:
    budget = kv_cache_budget(HOST, 0.5, None, one_sequence_bytes=1 << 20, max_model_len=512)
    assert budget.kv_cache_bytes == 12 * GIB - 2 * GIB


def test_too_small_for_one_sequence_is_the_core_message_with_numbers_and_flag() -> None:
    with pytest.raises(KvCacheTooSmallError) as err:
        kv_cache_budget(HOST, 0.9, 4096, one_sequence_bytes=65536, max_model_len=512)
    assert isinstance(err.value, ConfigError)
    what, hint = err.value.what, err.value.hint
    assert "max_model_len=512" in what and "needs 65536 B" in what
    assert "--kv-cache-memory-bytes=4096 gives 4096 B" in what
    assert hint.startswith("--kv-cache-memory-bytes 65536 ") and "--max-model-len 32 " in hint
    # The same text the doctor renders: the core's budget, not an adapter's addition.
    budget = err.value.budget
    assert (budget.what(), budget.hint()) == (what, hint)


def test_utilization_too_low_names_that_flag_and_what_the_process_holds() -> None:
    with pytest.raises(KvCacheTooSmallError) as err:
        kv_cache_budget(HOST, 0.05, None, one_sequence_bytes=GIB, max_model_len=512)
    what = err.value.what
    assert "24.00 GiB x 0.05 (--gpu-memory-utilization)" in what
    assert "2.00 GiB held by this process at its peak" in what
    assert err.value.hint.startswith("--gpu-memory-utilization ")


def test_the_share_beyond_free_memory_is_named_and_taken_off() -> None:
    short = MemoryInfo(free_bytes=GIB, total_bytes=24 * GIB, peak_allocated_bytes=2 * GIB)
    budget = kv_cache_budget(short, 0.5, None, one_sequence_bytes=1 << 20, max_model_len=512)
    assert budget.kv_cache_bytes == GIB  # min(12 - 2 GiB, 1 GiB free)
    assert "9.00 GiB not free on the device" in budget.reason


def test_explicit_bytes_above_free_memory_are_refused() -> None:
    with pytest.raises(ConfigError, match="exceeds"):
        kv_cache_budget(HOST, 0.9, 30 * GIB, one_sequence_bytes=1, max_model_len=512)


def test_on_the_host_with_no_flag_the_core_default_sizes_the_cache() -> None:
    budget = kv_cache_budget(HOST, 0.92, None, 1 << 20, 512, host_workers=1)
    assert budget.kv_cache_bytes == 4 * GIB  # the cap: half of 20 GiB free is more
    assert "the host default, min(4.00 GiB cap, 0.50 x 20.00 GiB available" in budget.reason
    assert budget.warning is None
    busy = MemoryInfo(free_bytes=3 * GIB, total_bytes=24 * GIB, peak_allocated_bytes=2 * GIB)
    assert kv_cache_budget(busy, 0.92, None, 1 << 20, 512, host_workers=2).kv_cache_bytes == (
        3 * GIB // 2 // 2
    )


def test_on_the_host_a_flag_stands_and_most_of_the_ram_is_warned_about() -> None:
    taken = kv_cache_budget(HOST, 0.6, None, 1 << 20, 512, host_workers=1)
    assert taken.kv_cache_bytes == int(24 * GIB * 0.6) - 2 * GIB
    assert taken.warning is not None and "60% of the host's 24.00 GiB RAM" in taken.warning
    small = kv_cache_budget(HOST, 0.92, GIB, 1 << 20, 512, host_workers=1)
    assert (small.kv_cache_bytes, small.warning) == (GIB, None)
    # Off the host, utilization x device memory is vLLM's rule and no RAM is at stake.
    npu = kv_cache_budget(HOST, 0.92, None, 1 << 20, 512)
    assert npu.kv_cache_bytes == 20 * GIB  # 0.92 x 24 GiB - 2 GiB held, capped by 20 GiB free
    assert npu.warning is None
