"""The runtime port's graph role (NpuGraphs over torch_npu's NPUGraph) on the emulated
device: each check of runtime_graph_checks.py, in one fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHECKS = Path(__file__).with_name("runtime_graph_checks.py")
NAMES = (
    "the_capture_stream_is_the_processs_own_and_current",
    "capture_and_replay_through_the_port_follow_inputs_written_in_place",
    "updatable_attention_takes_new_lengths_only_through_update",
    "a_device_value_read_inside_capture_is_refused",
    "a_graph_over_memory_released_since_capture_refuses_to_replay",
    "a_staged_collective_is_recorded_in_the_capture_and_rerun_at_each_replay",
    "a_staged_collective_on_a_backend_no_graph_holds_is_refused_in_capture",
)


@pytest.fixture(scope="module")
def results() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(CHECKS)], capture_output=True, text=True, env=env, timeout=600
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("CHECKS ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    out: dict[str, str] = json.loads(lines[-1].removeprefix("CHECKS "))
    return out


def test_every_check_ran(results: dict[str, str]) -> None:
    assert sorted(results) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_runtime_graphs(results: dict[str, str], name: str) -> None:
    assert results[name] == "ok", results[name]
