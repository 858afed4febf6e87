"""Run a test's Python source in a fresh interpreter with this tree's src first on the path.

For checks that need a process nothing else has imported into (which modules a patch
reaches, what a start imports). The script prints "ok ..." when its checks pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def run_ok(source: str, *args: str, timeout: float = 900) -> str:
    """The script's stdout; fails the test with its stderr's tail unless it printed ok."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-c", source, *args], capture_output=True, text=True, env=env,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok "), done.stdout[-3000:]
    return done.stdout
