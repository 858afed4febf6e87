"""Reading the output of child processes that run side by side.

A child whose stdout is a pipe stops when the pipe is full (64 KiB: a few vLLM engine
starts' logs) until the parent reads it; reading the children one after the other would
hold every later child there until the earlier ones end. Each is read in a thread here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
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


def start_on(device: str, script: str | Path, *args: str) -> subprocess.Popen[str]:
    """`python script device *args` as a child beside others: the plugin picks the device
    from the argument (VLLM_ASCEND_DEVICE dropped), an `npu` child sees the emulated
    torch_npu (every Python process vLLM starts from it too), one OpenMP thread each."""
    from support.torch_npu_emulator.activate import child_env

    env = dict(os.environ)
    env.pop("VLLM_ASCEND_DEVICE", None)
    if device == "npu":
        env = child_env(env)
    env["OMP_NUM_THREADS"] = "1"  # the runs go side by side on a small machine
    return subprocess.Popen(
        [sys.executable, str(script), device, *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )


def host_and_npu(script: str | Path, model: str) -> dict[str, dict[str, Any]]:
    """The script's last RESULT on each device, both run side by side: {"host", "npu"}."""
    procs = {device: start_on(device, script, model) for device in ("host", "npu")}
    return read_all(procs, last_result)


def first_partings(
    ids: list[list[int]], reference: list[list[int]], top2: list[list[list[float]]]
) -> list[tuple[int, int, float]]:
    """(request, step, the reference's top-2 gap there) where each of `ids` first leaves
    the reference's ids; requests that never leave it are not listed."""
    parted = []
    for i, (mine, theirs) in enumerate(zip(ids, reference, strict=True)):
        step = next((s for s, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b),
                    None)
        if step is not None:
            best, second = top2[i][step]
            parted.append((i, step, round(best - second, 4)))
    return parted
