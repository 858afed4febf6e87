"""Runs a script of named checks in one fresh process and reads its results: the script
prints one line `CHECKS {"name": "ok" | "why it failed", ...}` (the emulated device's and
its graphs' checks, which need a process of their own to register the device)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run_checks(script: Path, timeout: int) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=timeout
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("CHECKS ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    out: dict[str, str] = json.loads(lines[-1].removeprefix("CHECKS "))
    return out
