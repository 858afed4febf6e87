"""Profiling: the device's profiler behind vLLM's profiler hooks (--profiler-config).

One profiling session at a time per worker: `start(request)` begins recording what the
request asks for, `step()` marks an engine iteration (it advances a wait/warmup/active
schedule), `stop()` ends the session and writes its trace under `request.trace_dir`.
"""

from __future__ import annotations

import abc
import contextlib
import enum
from collections.abc import Iterable

from attrs import field, frozen


class ProfiledActivity(enum.Enum):
    """What a session records: the host's ops (torch's CPU activity) or the device's
    kernels (on an NPU, torch_npu's NPU activity)."""

    HOST = "host"
    DEVICE = "device"


@frozen
class ProfileSchedule:
    """torch's profiler schedule: `wait` steps off, `warmup` steps recorded and dropped,
    then `active` steps recorded (once)."""

    wait: int = 0
    warmup: int = 0
    active: int = 1


def _activities(value: Iterable[ProfiledActivity]) -> frozenset[ProfiledActivity]:
    return frozenset(value)


@frozen
class ProfileRequest:
    """One profiling session: where its trace goes and what it records."""

    trace_dir: str
    worker_name: str
    activities: frozenset[ProfiledActivity] = field(converter=_activities)
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False
    use_gzip: bool = True
    schedule: ProfileSchedule | None = None


class DeviceProfiler(abc.ABC):
    """The serving device's profiler; one session at a time."""

    @abc.abstractmethod
    def start(self, request: ProfileRequest) -> None:
        """Begin recording; raises if a session is already running."""

    @abc.abstractmethod
    def step(self) -> None:
        """One engine iteration passed (advances the request's schedule, if any)."""

    @abc.abstractmethod
    def stop(self) -> str | None:
        """End the session and write its trace; returns where it was written (None when a
        schedule ended it before any step was recorded)."""

    def annotate(self, name: str) -> contextlib.AbstractContextManager[None]:
        """A labelled range in the trace around what runs inside (an engine step)."""
        return contextlib.nullcontext()
