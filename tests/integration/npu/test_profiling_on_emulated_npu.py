"""vLLM's profiler hooks on the NPU path (emulated torch_npu and `npu` device, bf16):
LLM.start_profile / stop_profile around a generate write torch_npu's profiling directory
under --profiler-config's torch_profiler_dir, and its trace names the torch_npu ops the
model ran (host side `npu::NAME`, NPU side the CANN kernel). An emulator, not hardware:
what a real torch_npu session records besides (CANN, AscendCL, the AI Core metrics) is
not emulated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.torch_npu_emulator.activate import child_env

RUNNER = Path(__file__).with_name("profile_run.py")


@pytest.fixture(scope="module")
def run(npu_model_dirs, tmp_path_factory) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    trace_dir = tmp_path_factory.mktemp("npu_traces")
    env = child_env(dict(os.environ))
    env.pop("VLLM_ASCEND_DEVICE", None)
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [sys.executable, str(RUNNER), str(trace_dir), npu_model_dirs["llama"]],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, out[-4000:]
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    result["dir"] = str(trace_dir)
    return result


def test_torch_npus_profiler_serves_behind_the_worker(run) -> None:  # type: ignore[no-untyped-def]
    assert (run["profiler"], run["device_profiler"]) == ("PortProfiler", "NpuProfiler")
    # One session directory, torch_npu's name for it, where the config asked.
    (session,) = run["sessions"]
    assert session.startswith("gen_rank0_") and session.endswith("_ascend_pt")
    assert run["session"] == str(Path(run["dir"], session))


def test_the_trace_names_the_torch_npu_ops_on_host_and_npu(run) -> None:  # type: ignore[no-untyped-def]
    ops = {"npu_fused_infer_attention_score", "npu_rms_norm", "npu_add_rms_norm"}
    kernels = {"FusedInferAttentionScore", "RmsNorm", "AddRmsNorm"}
    assert kernels <= set(run["kernels"])
    names = set(run["trace_names"])
    assert {f"npu::{op}" for op in ops} <= names
    assert "aten::embedding" in names
    assert "execute_context_1(5)_generation_0(0)" in names


def test_with_stack_asks_torch_npu_for_module_hierarchy(run) -> None:  # type: ignore[no-untyped-def]
    assert run["common_config"]["with_stack"] is False
    assert run["common_config"]["with_modules"] is True


def test_profiling_does_not_change_the_ids(run) -> None:  # type: ignore[no-untyped-def]
    before, profiled = run["ids"]
    assert before == profiled
