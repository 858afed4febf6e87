"""Reading the output of child processes that run side by side.

A child whose stdout is a pipe stops when the pipe is full (64 KiB: a few vLLM engine
starts' logs) until the parent reads it; reading the children one after the other would
hold every later child there until the earlier ones end. Each is read in a thread here.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

K = TypeVar("K")
R = TypeVar("R")


def read_all(
    procs: dict[K, subprocess.Popen[str]], read: Callable[[subprocess.Popen[str]], R]
) -> dict[K, R]:
    """`read` of every child (e.g. communicate, then parse its RESULT line), all at once."""
    with ThreadPoolExecutor(max(1, len(procs))) as pool:
        futures = {key: pool.submit(read, proc) for key, proc in procs.items()}
        return {key: future.result() for key, future in futures.items()}
