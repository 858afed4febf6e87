"""torch_npu.npu stand-ins: the runtime API names the adapter calls, on the host.

Only names torch_npu 2.14.0's torch_npu.npu binds (per the extracted API list) can
exist here; anything else raises AttributeError as the real module would.
"""

from __future__ import annotations

import types
from collections.abc import Iterable
from typing import Any

import torch


class EmulatedStream:
    """A stream handle with the methods callers use; work on the host is synchronous."""

    def synchronize(self) -> None:
        return None

    def wait_stream(self, other: EmulatedStream) -> None:
        return None


class EmulatedEvent:
    def __init__(self, enable_timing: bool = False, blocking: bool = False) -> None:
        self.enable_timing = enable_timing

    def record(self, stream: EmulatedStream | None = None) -> None:
        return None

    def synchronize(self) -> None:
        return None


class EmulatedNpuModule(types.ModuleType):
    """A fixed set of devices with a given SoC name and memory; counts the calls made."""

    def __init__(
        self,
        api_names: Iterable[str],
        soc_name: str = "Ascend910B1",
        device_count: int = 1,
        total_memory: int = 64 * 2**30,
    ) -> None:
        super().__init__("torch_npu.npu")
        self._api = frozenset(api_names)
        self.soc_name = soc_name
        self.num_devices = device_count
        self.total_memory = total_memory
        self.current = 0
        self.allocated_peak = 0
        self.calls: list[str] = []
        self.seeded: int | None = None
        self._stream = EmulatedStream()

    def _record(self, name: str) -> None:
        if name not in self._api:
            raise AttributeError(f"module 'torch_npu.npu' has no attribute '{name}'")
        self.calls.append(name)

    def set_device(self, device: Any) -> None:
        self._record("set_device")
        index = device if isinstance(device, int) else torch.device(device).index or 0
        if not 0 <= index < self.num_devices:
            raise RuntimeError(f"Invalid device id {index}")
        self.current = index

    def current_device(self) -> int:
        self._record("current_device")
        return self.current

    def device_count(self) -> int:
        self._record("device_count")
        return self.num_devices

    def get_device_name(self, device_name: Any = None) -> str:
        self._record("get_device_name")
        return self.soc_name

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        self._record("mem_get_info")
        return self.total_memory - self.allocated_peak, self.total_memory

    def max_memory_allocated(self, device: Any = None) -> int:
        self._record("max_memory_allocated")
        return self.allocated_peak

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self._record("reset_peak_memory_stats")
        self.allocated_peak = 0

    def synchronize(self, device: Any = None) -> None:
        self._record("synchronize")

    def empty_cache(self) -> None:
        self._record("empty_cache")

    def manual_seed_all(self, seed: int) -> None:
        self._record("manual_seed_all")
        self.seeded = seed
        torch.manual_seed(seed)

    def current_stream(self, device: Any = None) -> EmulatedStream:
        self._record("current_stream")
        return self._stream

    def Stream(self, *args: Any, **kwargs: Any) -> EmulatedStream:
        self._record("Stream")
        return EmulatedStream()

    def Event(self, *args: Any, **kwargs: Any) -> EmulatedEvent:
        self._record("Event")
        return EmulatedEvent(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in self._api:
            raise NotImplementedError(f"torch_npu.npu.{name} exists but is not emulated")
        raise AttributeError(f"module 'torch_npu.npu' has no attribute '{name}'")
