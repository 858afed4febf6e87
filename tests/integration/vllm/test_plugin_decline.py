"""vLLM's platform discovery with the plugin installed, in fresh processes (discovery is once
per process): decline with the reason when nothing asks for us, stop at once for a missing NPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_VENV_BIN = Path(sys.executable).parent

_SHOW_PLATFORM = (
    "from vllm.platforms import current_platform; "
    "print('PLATFORM=' + type(current_platform).__name__)"
)


def _run(
    device: str | None,
    argv: list[str] | None = None,
    path: str | None = None,
    extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_")}
    env.update(extra or {})
    if device is not None:
        env["VLLM_ASCEND_DEVICE"] = device
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), path) if p)
    return subprocess.run(
        argv or [sys.executable, "-c", _SHOW_PLATFORM], env=env, capture_output=True,
        text=True, timeout=600,
    )


@pytest.mark.parametrize("device", [None, "auto"])
def test_without_npu_or_request_the_plugin_declines_with_its_reason(device: str | None) -> None:
    result = _run(device)
    assert result.returncode == 0, result.stderr
    assert "PLATFORM=" in result.stdout
    assert "Ascend" not in result.stdout.split("PLATFORM=")[1]
    assert "Ascend plugin declines" in result.stderr
    assert "VLLM_ASCEND_DEVICE=cpu" in result.stderr  # the hint
    # No platform, but nothing failed: the reason is not repeated at exit.
    assert "no platform serves" not in result.stderr


def test_a_misspelt_device_variable_is_named_in_the_decline() -> None:
    result = _run(None, extra={"VLLM_ASCEND_DEVICES": "cpu"})
    assert result.returncode == 0, result.stderr
    decline = [line for line in result.stderr.splitlines() if "Ascend plugin declines" in line]
    assert len(decline) == 1, result.stderr
    assert "VLLM_ASCEND_DEVICES is set but the Ascend plugin does not read it" in decline[0]
    assert "Did you mean 'VLLM_ASCEND_DEVICE'?" in decline[0]


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


def test_when_no_platform_serves_the_reason_is_the_last_thing_printed() -> None:
    # No NPU, nothing asked for, and this vLLM wheel has no built-in platform for the
    # host: vLLM ends in its "Failed to infer device type" traceback, then our reason.
    result = _run(None, [str(_VENV_BIN / "vllm"), "--version"])
    assert result.returncode != 0
    assert "Failed to infer device type" in result.stderr  # vLLM's own error stays
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("vllm-plugin-ascend: no platform serves vLLM here.")
    assert "torch_npu" in last and "VLLM_ASCEND_DEVICE=cpu" in last


def test_when_another_platform_serves_nothing_is_repeated(tmp_path: Path) -> None:
    # Another platform plugin, installed as a distribution with the entry point vLLM scans.
    (tmp_path / "other_platform.py").write_text(
        "def register():\n    return 'vllm.platforms.cpu.CpuPlatform'\n"
    )
    info = tmp_path / "other_platform-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: other-platform\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[vllm.platform_plugins]\nother = other_platform:register\n"
    )
    result = _run(None, path=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "PLATFORM=CpuPlatform" in result.stdout
    assert "Ascend plugin declines" in result.stderr  # logged once, at discovery
    assert "no platform serves" not in result.stderr
