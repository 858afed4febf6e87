"""CPUs this process may use: its scheduling affinity, capped by the cgroup CPU quota.

Read the same way by `vllm serve` (the host threads plan) and by `ascend-doctor plan`,
so both count the same CPUs; os.cpu_count() ignores both limits.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def usable_cpus(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path | None = None) -> int | None:
    """The count, or None when this platform cannot tell."""
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()
    quota = cgroup_cpu_quota(cgroup_root, proc_cgroup or Path("/proc/self/cgroup"))
    if quota is not None:
        count = min(count, max(1, math.floor(quota)))
    return max(1, count)


def cgroup_cpu_quota(cgroup_root: Path, proc_cgroup: Path) -> float | None:
    """The tightest CPU quota (in CPUs) on this process's cgroup path, v2 or v1; None: none."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    limits: list[float] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if controllers == "":  # cgroup v2: cpu.max is "<quota|max> <period>"
            limits += _along(cgroup_root, rel, _read_v2)
        elif "cpu" in controllers.split(","):  # cgroup v1
            limits += _along(cgroup_root / "cpu", rel, _read_v1)
    return min(limits) if limits else None


def _along(base: Path, rel: str, read: Callable[[Path], float | None]) -> list[float]:
    """The limit of every directory from the cgroup up to the root (any may be tighter)."""
    found: list[float] = []
    parts = [p for p in rel.strip("/").split("/") if p]
    for depth in range(len(parts), -1, -1):
        value = read(base.joinpath(*parts[:depth]))
        if value is not None:
            found.append(value)
    return found


def _read_v2(directory: Path) -> float | None:
    try:
        quota, period = (directory / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _read_v1(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        if quota <= 0:
            return None
        return quota / int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError, ZeroDivisionError):
        return None
