"""Reading the output of child processes that run side by side.

A child whose stdout is a pipe stops when the pipe is full (64 KiB: a few vLLM engine
starts' logs) until the parent reads it; reading the children one after the other would
hold every later child there until the earlier ones end. Each is read in a thread here.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

K = TypeVar("K")
R = TypeVar("R")


def read_all(
    procs: dict[K, subprocess.Popen[str]], read: Callable[[subprocess.Popen[str]], R]
) -> dict[K, R]:
    """`read` of every child (e.g. communicate, then parse its RESULT line), all at once."""
    with ThreadPoolExecutor(max(1, len(procs))) as pool:
        futures = {key: pool.submit(read, proc) for key, proc in procs.items()}
        return {key: future.result() for key, future in futures.items()}


def result_lines(proc: subprocess.Popen[str], timeout: float = 900) -> list[dict[str, Any]]:
    """Every `RESULT {json}` line a child printed, in order, once it ended well; a child
    still running after `timeout` seconds (hung?) is killed and the test fails with its
    output's tail, as does one that exited non-zero or printed no result."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # an engine's processes follow it (vLLM's death pipe)
        out, _ = proc.communicate()
        pytest.fail(f"a child still ran after {timeout:.0f} s (hung?):\n" + out[-6000:])
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, out[-6000:]
    return [json.loads(line.removeprefix("RESULT ")) for line in lines]


def last_result(proc: subprocess.Popen[str], timeout: float = 900) -> dict[str, Any]:
    """The child's last RESULT line (result_lines)."""
    result: dict[str, Any] = result_lines(proc, timeout)[-1]
    return result
