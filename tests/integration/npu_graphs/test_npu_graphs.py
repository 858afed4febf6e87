"""NPU graphs on the emulated device (torch_npu 2.14.0's graph API): each check of
graph_checks.py runs in one fresh process, where the emulated device is registered.

The C++ extension is built on first use and cached under the repository's .cache/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.check_script import run_checks

CHECKS = Path(__file__).with_name("graph_checks.py")
NAMES = (
    "replay_gives_eagers_result_after_inputs_change_in_place",
    "capture_memory_comes_from_the_pool_and_replay_allocates_nothing",
    "graphs_sharing_a_pool_reuse_its_free_blocks",
    "every_refusal_raises_with_the_ops_name",
    "repeat_interleave_with_output_size_is_captured",
    "a_copy_from_pinned_memory_is_captured_and_reads_the_host_buffer_at_replay",
    "a_side_stream_not_joined_back_fails_the_capture",
    "a_side_stream_joined_back_is_captured",
    "capture_state_and_default_stream",
    "stale_lengths_give_a_different_answer_unless_the_task_group_is_updated",
    "replay_waits_for_the_external_event_until_the_update_records_it",
    "auto_dispatch_update_changes_the_captured_lengths",
    "mla_decode_lengths_are_captured_and_updated",
    "counters_per_step",
    "launch_sources_name_each_launch_and_copy_but_not_a_replay",
    "an_eager_wait_on_an_unrecorded_external_event_holds_its_stream",
    "vllms_torch_cuda_graph_names_capture_through_the_npu_runtime",
    "a_compiled_function_traces_the_emulated_ops_and_is_captured",
    "a_profiled_replay_records_the_captured_kernels",
)


@pytest.fixture(scope="module")
def results() -> dict[str, str]:
    return run_checks(CHECKS, timeout=900)


def test_every_check_ran(results: dict[str, str]) -> None:
    assert sorted(results) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_npu_graph(results: dict[str, str], name: str) -> None:
    assert results[name] == "ok", results[name]
