"""The host device's KV-cache default and the warning for a flag that takes most of the RAM."""

from __future__ import annotations

import pytest

from ascend_core.memory_budget import (
    HOST_KV_CAP_BYTES,
    BudgetFlag,
    HostKvDefault,
    MemoryDemand,
    SequenceCap,
    flags_leave_default,
    host_flag_warning,
    host_kv_default,
    plan_budget,
)
from ports.runtime import MemoryInfo

GIB = 1 << 30


def test_a_large_machine_gets_the_cap() -> None:
    default = host_kv_default(MemoryInfo(free_bytes=20 * GIB, total_bytes=24 * GIB))
    assert default.kv_cache_bytes == HOST_KV_CAP_BYTES == 4 * GIB


def test_a_busy_machine_gets_half_of_what_is_available_after_the_weights() -> None:
    default = host_kv_default(MemoryInfo(free_bytes=3 * GIB, total_bytes=24 * GIB))
    assert default.kv_cache_bytes == 3 * GIB // 2


def test_the_local_workers_share_the_default() -> None:
    memory = MemoryInfo(free_bytes=20 * GIB, total_bytes=24 * GIB)
    assert host_kv_default(memory, workers=2).kv_cache_bytes == 2 * GIB
    assert host_kv_default(MemoryInfo(3 * GIB, 24 * GIB), workers=3).kv_cache_bytes == GIB // 2


def test_nothing_available_gives_nothing_and_the_budget_fails_with_the_flag_to_set() -> None:
    default = host_kv_default(MemoryInfo(free_bytes=-5, total_bytes=24 * GIB))
    assert default.kv_cache_bytes == 0
    budget = plan_budget(MemoryDemand.from_host_default(default, 1024, 512, 16))
    assert not budget.fits
    assert "the host default" in budget.what()
    assert budget.hint().startswith("--kv-cache-memory-bytes 524288 ")


def test_the_demand_from_the_default_shows_its_arithmetic() -> None:
    default = HostKvDefault(10 * GIB, 24 * GIB)
    budget = plan_budget(MemoryDemand.from_host_default(default, 1024, 512, 16))
    assert budget.fits
    assert budget.demand.kv_bytes_available == 4 * GIB
    text = budget.what()
    assert "min(4.00 GiB cap, 0.50 x 10.00 GiB available after the weights" in text
    assert "of 24.00 GiB RAM), gives 4294967296 B" in text
    assert budget.demand.budget_flag is BudgetFlag.KV_CACHE_MEMORY_BYTES


def test_the_default_never_exceeds_what_the_sequences_can_fill() -> None:
    # A 5.5 MiB model: 2048 tokens x 256 sequences at 512 B a token fill 256 MiB (+ a block).
    cap = SequenceCap(256, 2048, 2048 * 512, 16 * 512)
    default = host_kv_default(MemoryInfo(20 * GIB, 24 * GIB), sequences=cap)
    assert default.kv_cache_bytes == cap.bytes == 256 * 2048 * 512 + 16 * 512
    budget = plan_budget(MemoryDemand.from_host_default(default, 512, 2048, 16))
    assert budget.fits and budget.sequences == 256
    text = budget.what()
    assert f"= 4.00 GiB, capped at the {cap.bytes} B (256.0 MiB) that max_num_seqs=256 " in text
    assert "sequences of max_model_len=2048 can use (--max-num-seqs" in text


def test_a_sequence_cap_above_the_share_changes_nothing() -> None:
    cap = SequenceCap(1024, 8192, 8192 * 4096)  # 32 GiB
    default = host_kv_default(MemoryInfo(20 * GIB, 24 * GIB), workers=2, sequences=cap)
    assert default.kv_cache_bytes == 2 * GIB and not default.capped_by_sequences
    assert "capped" not in default.arithmetic()


@pytest.mark.parametrize(
    ("utilization", "explicit", "default"),
    [(0.92, None, True), (0.92, 0, True), (0.9, None, False), (0.92, GIB, False)],
)
def test_only_vllms_default_flags_leave_the_default(
    utilization: float, explicit: int | None, default: bool
) -> None:
    assert flags_leave_default(utilization, explicit) is default


def test_a_flag_over_half_the_ram_is_warned_about_with_the_fix() -> None:
    warning = host_flag_warning("--gpu-memory-utilization", int(24 * GIB * 0.8), 24 * GIB)
    assert warning is not None
    assert "--gpu-memory-utilization gives vLLM 19.20 GiB, 80% of the host's 24.00 GiB" in warning
    assert "Fix: leave out --gpu-memory-utilization and --kv-cache-memory-bytes" in warning
    assert host_flag_warning("--kv-cache-memory-bytes", 12 * GIB, 24 * GIB) is None
    assert host_flag_warning("--kv-cache-memory-bytes", 12 * GIB + 1, 24 * GIB) is not None
