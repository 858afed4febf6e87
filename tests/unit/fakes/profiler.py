"""A DeviceProfiler that records what it was asked (no torch profiler runs)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ports.profiler import DeviceProfiler, ProfileRequest


class FakeProfiler(DeviceProfiler):
    """Keeps the calls: ("start", request), ("step",), ("stop",), ("annotate", name)."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []
        self.running: ProfileRequest | None = None

    def start(self, request: ProfileRequest) -> None:
        self.calls.append(("start", request))
        self.running = request

    def step(self) -> None:
        self.calls.append(("step",))

    def stop(self) -> str | None:
        self.calls.append(("stop",))
        request, self.running = self.running, None
        return f"{request.trace_dir}/{request.worker_name}.trace" if request else None

    @contextlib.contextmanager
    def annotate(self, name: str) -> Iterator[None]:
        self.calls.append(("annotate", name))
        yield

    def names(self) -> list[object]:
        return [c[0] for c in self.calls]
