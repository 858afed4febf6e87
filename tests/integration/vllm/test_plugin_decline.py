"""vLLM's platform discovery with the plugin installed, in fresh processes (discovery is once
per process): decline with the reason when nothing asks for us, stop at once for a missing NPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_SHOW_PLATFORM = (
    "from vllm.platforms import current_platform; "
    "print('PLATFORM=' + type(current_platform).__name__)"
)


def _run(device: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_")}
    if device is not None:
        env["VLLM_ASCEND_DEVICE"] = device
    return subprocess.run(
        [sys.executable, "-c", _SHOW_PLATFORM], env=env, capture_output=True, text=True,
        timeout=120,
    )


@pytest.mark.parametrize("device", [None, "auto"])
def test_without_npu_or_request_the_plugin_declines_with_its_reason(device: str | None) -> None:
    result = _run(device)
    assert result.returncode == 0, result.stderr
    assert "PLATFORM=" in result.stdout
    assert "Ascend" not in result.stdout.split("PLATFORM=")[1]
    assert "Ascend plugin declines" in result.stderr
    assert "VLLM_ASCEND_DEVICE=cpu" in result.stderr  # the hint


def test_cpu_request_activates_the_host_platform() -> None:
    result = _run("cpu")
    assert result.returncode == 0, result.stderr
    assert "PLATFORM=AscendHostPlatform" in result.stdout


def test_npu_request_without_npu_fails_at_once_naming_what_is_missing() -> None:
    result = _run("npu")
    assert result.returncode != 0
    assert "PLATFORM=" not in result.stdout
    assert "VLLM_ASCEND_DEVICE=npu but no usable NPU" in result.stderr
    assert "torch_npu" in result.stderr  # what is missing here
    assert "Traceback" not in result.stderr
