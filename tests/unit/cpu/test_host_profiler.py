"""HostProfiler: torch's profiler on the CPU activity, a chrome trace per session."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from adapters.cpu.profiler import HostProfiler
from ports.profiler import ProfiledActivity, ProfileRequest, ProfileSchedule

HOST = ProfiledActivity.HOST


def _names(path: str) -> set[str]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return {e.get("name", "") for e in json.load(f)["traceEvents"]}


@pytest.mark.parametrize("use_gzip", [True, False])
def test_a_session_writes_a_chrome_trace_naming_the_ops(tmp_path: Path, use_gzip: bool) -> None:
    profiler = HostProfiler()
    profiler.start(ProfileRequest(str(tmp_path / "traces"), "rank0", {HOST}, use_gzip=use_gzip))
    with profiler.annotate("execute_context_1(4)"):
        torch.matmul(torch.randn(4, 8), torch.randn(8, 4))
    path = profiler.stop()
    assert path is not None and Path(path).parent == tmp_path / "traces"
    assert Path(path).name.startswith("rank0.")
    assert path.endswith(".pt.trace.json.gz" if use_gzip else ".pt.trace.json")
    assert {"aten::matmul", "execute_context_1(4)"} <= _names(path)


def test_a_schedule_that_never_reaches_its_active_steps_writes_nothing(tmp_path: Path) -> None:
    profiler = HostProfiler()
    schedule = ProfileSchedule(wait=5, warmup=1, active=1)
    profiler.start(ProfileRequest(str(tmp_path), "w", {HOST}, schedule=schedule))
    profiler.step()
    assert profiler.stop() is None
    assert list(tmp_path.iterdir()) == []


def test_the_host_refuses_a_device_activity(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no device activity"):
        HostProfiler().start(ProfileRequest(str(tmp_path), "w", {ProfiledActivity.DEVICE}))


def test_one_session_at_a_time(tmp_path: Path) -> None:
    profiler = HostProfiler()
    profiler.start(ProfileRequest(str(tmp_path), "w", {HOST}))
    with pytest.raises(RuntimeError, match="already running"):
        profiler.start(ProfileRequest(str(tmp_path), "w", {HOST}))
    profiler.stop()
    with pytest.raises(RuntimeError, match="no profiling session"):
        profiler.stop()
