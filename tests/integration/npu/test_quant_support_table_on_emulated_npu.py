"""The NPU column of the quantization support table: every row of support.quant_table on
the emulated NPU (quant_table_run.py, one fresh process), serve's config phase on our NPU
platform and the doctor agreeing: both accept, or both refuse before any weight loads with
the same message naming the layer and the scheme. An emulator, not Ascend hardware."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.quant_table import ROWS
from support.torch_npu_emulator.activate import child_env

RUNNER = Path(__file__).with_name("quant_table_run.py")


@pytest.fixture(scope="module")
def results(npu_model_dirs: dict[str, str], tmp_path_factory: pytest.TempPathFactory
            ) -> dict[str, Any]:
    env = child_env({k: v for k, v in os.environ.items() if k != "VLLM_ASCEND_DEVICE"})
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [sys.executable, str(RUNNER), json.dumps(npu_model_dirs),
         str(tmp_path_factory.mktemp("npu-quant-rows"))],
        capture_output=True, text=True, env=env, timeout=900,
    )
    out = proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, out[-4000:]
    found: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return found


@pytest.mark.parametrize(("row", "served"), [(i, ok) for i, _, _, ok in ROWS],
                         ids=[i for i, _, _, _ in ROWS])  # fmt: skip
def test_serve_and_the_doctor_agree_on_the_npu(results, row: str, served: bool) -> None:  # type: ignore[no-untyped-def]
    by_doctor, by_serve, failures, error, platform = results[row]
    assert platform != "AscendHostPlatform", platform
    assert (by_doctor, by_serve) == (not served, not served), (failures, error)
    if not served:
        assert error.startswith("StartupError: vllm-plugin-ascend: "), error
        assert failures and all(f in error for f in failures), (failures, error)
        assert all("on an Ascend NPU" in f for f in failures), failures
