"""torch_npu.npu stand-ins on the emulated `npu` device (support.emulated_npu_device).

Only names torch_npu 2.14.0's torch_npu.npu binds (per the extracted API list) can
exist here; anything else raises AttributeError as the real module would. The device is
installed when first used, so op-only tests on host tensors need no build.
"""

from __future__ import annotations

import contextlib
import ctypes
import types
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from support.torch_npu_emulator import graphs


def _npu(device: Any = None) -> torch.device:
    if device is None:
        return torch.device("npu", torch.accelerator.current_device_index())
    if isinstance(device, int):
        return torch.device("npu", device)
    d = torch.device(device)
    return (
        d if d.index is not None else torch.device("npu", torch.accelerator.current_device_index())
    )


class EmulatedStream(torch.Stream):
    """torch_npu.npu.Stream: a torch.Stream of the `npu` device (work runs when issued)."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> EmulatedStream:
        return super().__new__(cls, device=_npu(device), priority=priority)  # type: ignore[call-arg]


def emulated_event(
    enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
) -> torch.Event:
    """torch_npu.npu.Event(...): a torch.Event of the `npu` device (torch's own type, as
    torch.Event's methods take no subclass)."""
    return torch.Event(device=_npu(), enable_timing=enable_timing, blocking=blocking)


class EmulatedNpuAllocator:
    """torch_npu._C._npu_NPUAllocator of a pluggable allocator: its two functions."""

    def __init__(self, alloc_fn: int, free_fn: int) -> None:
        self.alloc_fn = alloc_fn
        self.free_fn = free_fn


class EmulatedPluggableAllocator:
    """torch_npu.npu.NPUPluggableAllocator: a .so's allocation functions, found by name
    (signatures `void* alloc(size_t, int, aclrtStream)`, `void free(void*, size_t, int,
    aclrtStream)`, as torch_npu's _npu_customAllocator casts them)."""

    def __init__(self, path_to_so_file: str, alloc_fn_name: str, free_fn_name: str) -> None:
        lib = ctypes.CDLL(path_to_so_file)
        alloc_fn = ctypes.cast(getattr(lib, alloc_fn_name), ctypes.c_void_p).value
        free_fn = ctypes.cast(getattr(lib, free_fn_name), ctypes.c_void_p).value
        if alloc_fn is None:
            raise RuntimeError("alloc_fn is None")
        if free_fn is None:
            raise RuntimeError("free_fn is None")
        self._allocator = EmulatedNpuAllocator(alloc_fn, free_fn)

    def allocator(self) -> EmulatedNpuAllocator:
        return self._allocator


class EmulatedNpuModule(types.ModuleType):
    """A fixed set of devices with a given SoC name and memory; counts the calls made."""

    def __init__(
        self,
        api_names: Iterable[str],
        soc_name: str = "Ascend910B1",
        device_count: int = 1,
        total_memory: int = 64 * 2**30,
        torch_npu: Any = None,
    ) -> None:
        super().__init__("torch_npu.npu")
        self._api = frozenset(api_names)
        self.soc_name = soc_name
        self.num_devices = device_count
        self.total_memory = total_memory
        self.calls: list[str] = []
        self.seeded: int | None = None
        self._ext: Any = None
        self.Stream = self._api_class("Stream", EmulatedStream)
        self.Event = self._api_function("Event", emulated_event)
        self._torch_npu = torch_npu
        # Sleep mode's pool API (torch_npu/npu/memory.py), as classes.
        for name in ("NPUPluggableAllocator", "MemPool", "use_mem_pool"):
            if name not in self._api:
                raise AttributeError(f"module 'torch_npu.npu' has no attribute '{name}'")
        self.NPUPluggableAllocator = EmulatedPluggableAllocator
        self.MemPool = self._mem_pool_class()
        graphs.bind(self, torch_npu)
        # The graph API (torch_npu/npu/graphs.py): classes as they are, so that isinstance
        # and subclassing work; the device is installed when one is first made.
        for name in (
            "NPUGraph",
            "graph",
            "ExternalEvent",
            "graph_pool_handle",
            "graph_task_group_begin",
            "graph_task_group_end",
            "graph_task_update_begin",
            "graph_task_update_end",
        ):
            if name not in self._api:
                raise AttributeError(f"module 'torch_npu.npu' has no attribute '{name}'")
            setattr(self, name, getattr(graphs, name))

    def _mem_pool_class(self) -> type:
        """torch_npu.npu.MemPool on the emulated device: only over a pluggable allocator
        (a pool of the caching allocator itself is not emulated)."""
        module = self

        class EmulatedMemPool:
            def __init__(
                self,
                allocator: EmulatedNpuAllocator | None = None,
                use_on_oom: bool = False,
                no_split: bool = False,
            ) -> None:
                if not isinstance(allocator, EmulatedNpuAllocator):
                    raise NotImplementedError(
                        "emulated torch_npu: a MemPool is emulated over a pluggable "
                        "allocator only (NPUPluggableAllocator(...).allocator())"
                    )
                self._pool = int(module.device().mempool_new(allocator.alloc_fn, allocator.free_fn))

            @property
            def id(self) -> tuple[int, int]:
                return (0, self._pool)

        return EmulatedMemPool

    @contextlib.contextmanager
    def use_mem_pool(self, pool: Any, device: Any = None) -> Iterator[None]:
        """This thread's allocations on the device go to `pool` (torch_npu.npu.use_mem_pool)."""
        self._record("use_mem_pool")
        index = self._index(device)
        previous = self.device().allocate_to_pool(index, pool.id[1])
        try:
            yield
        finally:
            self.device().allocate_to_pool(index, previous)

    def _api_class(self, name: str, cls: type) -> type:
        if name not in self._api:
            raise AttributeError(f"module 'torch_npu.npu' has no attribute '{name}'")
        record = self._record

        class Recorded(cls):  # type: ignore[misc,valid-type]
            def __new__(c, *args: Any, **kwargs: Any) -> Any:
                record(name)
                return cls.__new__(c, *args, **kwargs)

        Recorded.__name__ = name
        return Recorded

    def _api_function(self, name: str, fn: Any) -> Any:
        if name not in self._api:
            raise AttributeError(f"module 'torch_npu.npu' has no attribute '{name}'")

        def call(*args: Any, **kwargs: Any) -> Any:
            self._record(name)
            return fn(*args, **kwargs)

        return call

    def device(self) -> Any:
        """The emulated device's extension, installed with this module as torch.npu."""
        if self._ext is None:
            from support.emulated_npu_device import install

            self._ext = install(self.num_devices, self.total_memory, self)
            graphs.bind(self, self._torch_npu)
        return self._ext

    def _record(self, name: str) -> None:
        if name not in self._api:
            raise AttributeError(f"module 'torch_npu.npu' has no attribute '{name}'")
        self.calls.append(name)
        self.device()

    def _index(self, device: Any) -> int:
        return int(_npu(device).index or 0) if device is not None else self.current_device()

    def is_available(self) -> bool:
        self._record("is_available")
        return True

    def is_initialized(self) -> bool:  # asked by fake tensors made on npu (torch.compile)
        self._record("is_initialized")
        return True

    def set_device(self, device: Any) -> None:
        self._record("set_device")
        index = device if isinstance(device, int) else torch.device(device).index or 0
        if not 0 <= index < self.num_devices:
            raise RuntimeError(f"Invalid device id {index}")
        torch.accelerator.set_device_index(index)

    def current_device(self) -> int:
        self._record("current_device")
        return int(self.device().current_device())

    def device_count(self) -> int:
        self._record("device_count")
        return self.num_devices

    def get_device_name(self, device_name: Any = None) -> str:
        self._record("get_device_name")
        return self.soc_name

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        self._record("mem_get_info")
        mem = self.device().memory(self._index(device))
        return int(mem["capacity"] - mem["allocated"]), int(mem["capacity"])

    def memory_allocated(self, device: Any = None) -> int:
        self._record("memory_allocated")
        return int(self.device().memory(self._index(device))["allocated"])

    def max_memory_allocated(self, device: Any = None) -> int:
        self._record("max_memory_allocated")
        return int(self.device().memory(self._index(device))["peak"])

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self._record("reset_peak_memory_stats")
        self.device().reset_peak(self._index(device))

    def synchronize(self, device: Any = None) -> None:
        self._record("synchronize")
        torch.accelerator.synchronize()

    def empty_cache(self) -> None:
        self._record("empty_cache")

    def manual_seed_all(self, seed: int) -> None:
        self._record("manual_seed_all")
        self.seeded = seed
        torch.default_generator.manual_seed(seed)  # random ops run on CPU kernels

    def manual_seed(self, seed: int) -> None:
        self._record("manual_seed")
        self.seeded = seed
        torch.default_generator.manual_seed(seed)

    def current_stream(self, device: Any = None) -> torch.Stream:
        self._record("current_stream")
        return torch.accelerator.current_stream(_npu(device))

    def default_stream(self, device: Any = None) -> torch.Stream:
        self._record("default_stream")
        d = _npu(device)
        kind = torch.accelerator.current_stream(d).device_type  # the backend's enum value
        return torch.Stream(stream_id=0, device_index=d.index, device_type=kind)  # type: ignore[call-arg]

    def set_stream(self, stream: torch.Stream) -> None:
        self._record("set_stream")
        torch.accelerator.set_stream(stream)

    @contextlib.contextmanager
    def stream(self, stream: torch.Stream | None) -> Iterator[None]:
        self._record("stream")
        if stream is None:
            yield
            return
        previous = torch.accelerator.current_stream(stream.device)
        torch.accelerator.set_stream(stream)
        try:
            yield
        finally:
            torch.accelerator.set_stream(previous)

    def is_current_stream_capturing(self) -> bool:
        self._record("is_current_stream_capturing")
        return graphs.is_current_stream_capturing()

    def host_empty_cache(self) -> None:
        self._record("host_empty_cache")

    def _is_in_bad_fork(self) -> bool:  # torch's device-module protocol, not torch_npu API
        return False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in self._api:
            raise NotImplementedError(f"torch_npu.npu.{name} exists but is not emulated")
        raise AttributeError(f"module 'torch_npu.npu' has no attribute '{name}'")
