"""The emulated `npu` device (test support): each property checked in one fresh process.

The C++ extension is built on first use and cached under the repository's .cache/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.check_script import run_checks

CHECKS = Path(__file__).with_name("emulated_device_checks.py")
NAMES = (
    "tensors_have_device_type_npu_and_compute_on_it",
    "views_and_in_place_slice_writes_share_device_memory",
    "ops_mixing_devices_fail_but_cpu_scalars_mix",
    "advanced_indexing_takes_cpu_indices_as_torch_does",
    "device_to_host_copies_and_scalar_reads_are_counted",
    "host_to_device_copies_are_counted_and_device_copies_are_not_syncs",
    "allocated_and_peak_bytes_back_mem_get_info",
    "allocations_past_the_capacity_fail_as_out_of_memory",
    "two_devices_with_a_device_guard",
    "streams_and_events_are_handles",
    "pinned_host_memory_and_out_arguments",
    "a_pinned_buffer_rewritten_while_its_copy_is_in_flight_is_refused",
    "the_v2_decode_tails_arena_is_rewritten_only_after_its_last_copy_ran",
    "npu_runtime_runs_on_the_device",
    "sleep_memory_releases_device_memory_and_a_released_tensor_refuses_use",
    "vmm_sleep_pool_keeps_addresses_and_captured_graphs_replay_after_waking",
)


@pytest.fixture(scope="module")
def results() -> dict[str, str]:
    return run_checks(CHECKS, timeout=600)


def test_every_check_ran(results: dict[str, str]) -> None:
    assert sorted(results) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_emulated_device(results: dict[str, str], name: str) -> None:
    assert results[name] == "ok", results[name]
