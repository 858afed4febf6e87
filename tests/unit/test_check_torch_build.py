"""scripts/check_torch_build.py against stand-in torch packages of each build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_torch_build.py"


def _run(
    tmp_path: Path, version: str, cuda: str | None, *args: str
) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        f"__version__ = {version!r}\n"
        f"class version:\n    cuda = {cuda!r}\n    hip = None\n"
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env
    )


def test_the_cpu_build_passes(tmp_path: Path) -> None:
    done = _run(tmp_path, "2.13.0+cpu", None)
    assert done.returncode == 0, done.stderr
    assert "torch 2.13.0+cpu (CPU build)" in done.stdout


def test_the_cuda_build_fails_with_the_fix(tmp_path: Path) -> None:
    done = _run(tmp_path, "2.13.0", "12.8")
    assert done.returncode == 1
    assert "torch 2.13.0 is the CUDA 12.8 build" in done.stderr
    assert "TORCH_INDEX=https://download.pytorch.org/whl/cpu" in done.stderr
    assert "PIP_FIND_LINKS=<dir>" in done.stderr


def test_any_build_is_accepted_when_asked(tmp_path: Path) -> None:
    assert _run(tmp_path, "2.13.0", "12.8", "--expect", "any").returncode == 0
