"""FakeRuntime: the device-runtime port with fixed memory numbers and no device."""

from __future__ import annotations

import contextlib
from typing import Any

from ports.runtime import DeviceRuntime, MemoryInfo


class FakeRuntime(DeviceRuntime):
    """Reports the memory it was given; the device calls do nothing (no torch here)."""

    def __init__(self, memory: MemoryInfo) -> None:
        self.memory = memory

    def device(self, index: int) -> Any:
        raise NotImplementedError("a FakeRuntime has no torch device")

    def set_device(self, index: int) -> None:
        """No device to select."""

    def device_name(self, index: int = 0) -> str:
        return "fake host"

    def memory_info(self) -> MemoryInfo:
        return self.memory

    def allocated_bytes(self) -> int | None:
        return None  # a fake holds no tensors

    def reset_peak_memory(self) -> None:
        """Nothing is measured."""

    def synchronize(self) -> None:
        """Nothing is queued."""

    def empty_cache(self) -> None:
        """Nothing is cached."""

    def seed(self, seed: int) -> None:
        """Nothing is random."""

    def current_stream(self) -> Any:
        return None

    def runner_scope(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()
