"""The device-runtime port on torch_npu.npu: devices, memory, sync, streams, seeds, graphs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import torch

from ascend_core.chip import chip_family_from_soc, served_chip_family
from ports.device import ChipFamily, DeviceFacts, DeviceKind
from ports.runtime import DeviceGraphs, DeviceRuntime, MemoryInfo


class NpuRuntime(DeviceRuntime):
    """One NPU as a worker sees it.

    `torch_npu` is the module itself, handed in by the composition root (or the
    emulated torch_npu on the emulated `npu` device in tests); every call goes through
    it so the contract test can read them.
    """

    def __init__(self, torch_npu: ModuleType) -> None:
        self._torch_npu = torch_npu
        self._graphs: NpuGraphs | None = None

    def device(self, index: int) -> torch.device:
        return torch.device("npu", index)

    def set_device(self, index: int) -> None:
        self._torch_npu.npu.set_device(index)

    def device_count(self) -> int:
        """How many NPUs this process sees (for facts; not a port method)."""
        return int(self._torch_npu.npu.device_count())

    def device_name(self, index: int = 0) -> str:
        return str(self._torch_npu.npu.get_device_name(index))

    def chip_family(self, index: int = 0) -> ChipFamily | None:
        """From the SoC name; None when the chip is not one this plugin serves."""
        return chip_family_from_soc(self.device_name(index))

    def memory_info(self) -> MemoryInfo:
        free, total = self._torch_npu.npu.mem_get_info()
        peak = self._torch_npu.npu.max_memory_allocated()
        return MemoryInfo(
            free_bytes=int(free), total_bytes=int(total), peak_allocated_bytes=int(peak)
        )

    def allocated_bytes(self) -> int | None:
        """torch_npu's caching allocator: bytes its live tensors occupy (block-rounded)."""
        return int(self._torch_npu.npu.memory_allocated())

    def reset_peak_memory(self) -> None:
        self._torch_npu.npu.reset_peak_memory_stats()

    def synchronize(self) -> None:
        self._torch_npu.npu.synchronize()

    def empty_cache(self) -> None:
        self._torch_npu.npu.empty_cache()

    def seed(self, seed: int) -> None:
        self._torch_npu.npu.manual_seed_all(seed)

    def current_stream(self) -> Any:
        return self._torch_npu.npu.current_stream()

    def graphs(self) -> NpuGraphs:
        """torch_npu.npu's NPUGraph: one per process, holding its capture stream."""
        if self._graphs is None:
            self._graphs = NpuGraphs(self._torch_npu)
        return self._graphs

    @contextlib.contextmanager
    def runner_scope(self) -> Iterator[None]:
        """vLLM's GPU runner's torch.cuda stream, event, sync and graph names bound to
        torch_npu.npu's, restored on exit (as vLLM's XPU runner maps them to torch.xpu).

        Each is a fresh callable, not torch_npu's object itself: torch.compile's dynamo
        refuses one function registered under two device modules. Graph names are bound
        lazily: a graph is captured only when the plan asks for one.
        """

        def event(*args: Any, blocking: bool = False, external: bool = False, **kw: Any) -> Any:
            return self._torch_npu.npu.Event(
                *args, blocking=blocking, **kw
            )  # torch_npu has no `external`

        names: dict[str, Any] = {
            "Stream": self._torch_npu.npu.Stream,
            "Event": event,
            "current_stream": _fresh(lambda: self._torch_npu.npu.current_stream),
            "default_stream": _fresh(lambda: self._torch_npu.npu.default_stream),
            "stream": _fresh(lambda: self._torch_npu.npu.stream),
            "set_stream": _fresh(lambda: self._torch_npu.npu.set_stream),
            "synchronize": _fresh(lambda: self._torch_npu.npu.synchronize),
            "is_current_stream_capturing": _fresh(
                lambda: self._torch_npu.npu.is_current_stream_capturing
            ),
            "graph": _fresh(lambda: self._torch_npu.npu.graph),
            "graph_pool_handle": _fresh(lambda: self._torch_npu.npu.graph_pool_handle),
            "CUDAGraph": _fresh(lambda: self._torch_npu.npu.NPUGraph),
        }
        saved = {name: torch.cuda.__dict__.get(name, _MISSING) for name in names}
        for name, value in names.items():
            setattr(torch.cuda, name, value)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is _MISSING:
                    delattr(torch.cuda, name)
                else:
                    setattr(torch.cuda, name, value)

    def facts(self) -> DeviceFacts:
        """What the core asks of the devices, read from the initialised runtime."""
        name = self.device_name(0)
        family = served_chip_family(name)
        _, total = self._torch_npu.npu.mem_get_info()
        return DeviceFacts(
            kind=DeviceKind.NPU,
            chip_family=family,
            device_count=self.device_count(),
            memory_bytes_per_device=int(total),
            device_name=name,
        )


class NpuGraphs(DeviceGraphs):
    """torch_npu.npu's graph API (2.14.0's torch_npu/npu/graphs.py): NPUGraph, the
    `graph` capture context (with auto-dispatch capture for updatable attention ops),
    graph pools, and torch_npu._C._weak_ref_tensor."""

    def __init__(self, torch_npu: ModuleType) -> None:
        self._torch_npu = torch_npu
        self._stream: Any = None

    def capture_stream(self) -> Any:
        # An NPU graph cannot be captured on the default stream (as with CUDA graphs):
        # the process runs on a stream of its own from here on, ordered after the old.
        if self._stream is None:
            stream = self._torch_npu.npu.Stream()
            stream.wait_stream(self._torch_npu.npu.current_stream())
            self._torch_npu.npu.set_stream(stream)
            self._stream = stream
        return self._stream

    def pool(self) -> Any:
        return self._torch_npu.npu.graph_pool_handle()

    def new_graph(self) -> Any:
        return self._torch_npu.npu.NPUGraph()

    def capture(
        self, graph: Any, pool: Any, stream: Any, updatable: bool = False
    ) -> contextlib.AbstractContextManager[None]:
        return self._torch_npu.npu.graph(  # type: ignore[no-any-return]
            graph, pool=pool, stream=stream, auto_dispatch_capture=updatable
        )

    def replay(self, graph: Any) -> None:
        graph.replay()

    def update(self, graph: Any, host_arguments: list[dict[str, Any]]) -> None:
        graph.update(cpu_update_input=host_arguments)

    def weak_ref(self, tensor: torch.Tensor) -> torch.Tensor:
        return self._torch_npu._C._weak_ref_tensor(tensor)  # type: ignore[no-any-return]


_MISSING = object()


def _fresh(target: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
    """A new function calling `target()(...)`: looked up at call time, never aliased."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return target()(*args, **kwargs)

    return call
