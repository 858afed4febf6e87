"""RecordingRuntime: a device runtime wrapped so that its memory calls are recorded."""

from __future__ import annotations

from typing import Any

from ports.runtime import DeviceRuntime, MemoryInfo


class RecordingRuntime(DeviceRuntime):
    """Wraps another runtime (the worker's real one); each memory call joins `events`."""

    def __init__(self, inner: DeviceRuntime, events: list[str]) -> None:
        self.inner = inner
        self.events = events
        self.readings: list[MemoryInfo] = []

    def device(self, index: int) -> Any:
        return self.inner.device(index)

    def set_device(self, index: int) -> None:
        self.inner.set_device(index)

    def device_name(self, index: int = 0) -> str:
        return self.inner.device_name(index)

    def memory_info(self) -> MemoryInfo:
        self.events.append("memory_info")
        info = self.inner.memory_info()
        self.readings.append(info)
        return info

    def allocated_bytes(self) -> int | None:
        self.events.append("allocated_bytes")
        return self.inner.allocated_bytes()

    def reset_peak_memory(self) -> None:
        self.events.append("reset_peak_memory")
        self.inner.reset_peak_memory()

    def synchronize(self) -> None:
        self.events.append("synchronize")
        self.inner.synchronize()

    def empty_cache(self) -> None:
        self.events.append("empty_cache")
        self.inner.empty_cache()

    def seed(self, seed: int) -> None:
        self.inner.seed(seed)

    def current_stream(self) -> Any:
        return self.inner.current_stream()

    def runner_scope(self) -> Any:
        return self.inner.runner_scope()


class FixedMemoryRuntime(RecordingRuntime):
    """The real runtime, with the memory numbers of another machine."""

    def __init__(self, inner: DeviceRuntime, memory: MemoryInfo) -> None:
        super().__init__(inner, [])
        self.memory = memory

    def memory_info(self) -> MemoryInfo:
        return self.memory
