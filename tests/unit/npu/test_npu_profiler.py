"""NpuProfiler on the emulated torch_npu.profiler (2.14.0's API): the options it passes,
and a trace in torch_npu's layout that names the torch_npu ops the session ran."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
import torch

from adapters.npu.ops import NpuOps
from adapters.npu.profiler import NpuProfiler
from ports.profiler import ProfiledActivity, ProfileRequest, ProfileSchedule
from support.torch_npu_emulator import make_torch_npu

HOST, DEVICE = ProfiledActivity.HOST, ProfiledActivity.DEVICE


def _run_ops(tnpu) -> None:  # type: ignore[no-untyped-def]
    ops = NpuOps(tnpu)
    x = torch.randn(4, 64)
    ops.rms_norm(x, torch.ones(64), 1e-6)
    torch.matmul(x, x.T)


def _kernels(session: str) -> list[str]:
    with open(Path(session, "ASCEND_PROFILER_OUTPUT", "kernel_details.csv")) as f:
        return [row["Name"] for row in csv.DictReader(f)]


def _trace_names(session: str) -> set[str]:
    with open(Path(session, "ASCEND_PROFILER_OUTPUT", "trace_view.json")) as f:
        return {e.get("name", "") for e in json.load(f)}


def test_a_session_writes_torch_npus_layout_naming_the_ops(tmp_path: Path) -> None:
    tnpu = make_torch_npu()
    profiler = NpuProfiler(tnpu)
    profiler.start(ProfileRequest(str(tmp_path), "rank0", {HOST, DEVICE}, with_stack=True))
    with profiler.annotate("execute_context_1(4)"):
        _run_ops(tnpu)
    session = profiler.stop()
    assert session is not None
    name = os.path.basename(session)
    assert name.startswith(f"rank0_{os.getpid()}_") and name.endswith("_ascend_pt")
    assert _kernels(session) == ["RmsNorm"]
    names = _trace_names(session)
    # Host side: the torch_npu op as torch_npu's dispatcher names it, aten ops, the range.
    assert {"npu::npu_rms_norm", "aten::matmul", "execute_context_1(4)"} <= names
    assert "RmsNorm" in names  # the NPU kernel, in the Ascend Hardware process
    info = json.loads(Path(session, "profiler_info.json").read_text())
    common = info["config"]["common_config"]
    # vLLM's with_stack asks for torch_npu's with_modules (stack capture is costly there).
    assert (common["with_stack"], common["with_modules"]) == (False, True)
    experimental = info["config"]["experimental_config"]
    assert experimental["_profiler_level"] == tnpu.profiler.ProfilerLevel.Level1
    assert experimental["_export_type"] == [tnpu.profiler.ExportType.Text]


def test_the_npu_activity_alone_records_kernels_without_host_ops(tmp_path: Path) -> None:
    tnpu = make_torch_npu()
    profiler = NpuProfiler(tnpu)
    profiler.start(ProfileRequest(str(tmp_path), "w", {DEVICE}))
    _run_ops(tnpu)
    session = profiler.stop()
    assert session is not None and _kernels(session) == ["RmsNorm"]
    assert "aten::matmul" not in _trace_names(session)


def test_ops_outside_a_session_are_not_recorded(tmp_path: Path) -> None:
    tnpu = make_torch_npu()
    profiler = NpuProfiler(tnpu)
    profiler.start(ProfileRequest(str(tmp_path), "w", {HOST, DEVICE}))
    session = profiler.stop()
    _run_ops(tnpu)
    assert session is not None and _kernels(session) == []


def test_a_schedule_records_only_its_active_steps(tmp_path: Path) -> None:
    tnpu = make_torch_npu()
    profiler = NpuProfiler(tnpu)
    request = ProfileRequest(
        str(tmp_path), "w", {DEVICE}, schedule=ProfileSchedule(wait=1, warmup=1, active=2)
    )
    profiler.start(request)
    for _ in range(4):  # wait, warmup, active, active
        _run_ops(tnpu)
        profiler.step()
    session = profiler.stop()
    assert session is not None and _kernels(session) == ["RmsNorm", "RmsNorm"]


def test_one_session_at_a_time(tmp_path: Path) -> None:
    profiler = NpuProfiler(make_torch_npu())
    profiler.start(ProfileRequest(str(tmp_path), "w", {DEVICE}))
    with pytest.raises(RuntimeError, match="already running"):
        profiler.start(ProfileRequest(str(tmp_path), "w", {DEVICE}))
    profiler.stop()
    with pytest.raises(RuntimeError, match="no profiling session"):
        profiler.stop()
