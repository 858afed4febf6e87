"""Device runtime: what a worker needs of a device (memory, sync, streams, seeds, graphs)."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

from attrs import frozen

if TYPE_CHECKING:
    import torch


@frozen
class MemoryInfo:
    """Device memory in bytes: free and total now, and the peak the process allocated."""

    free_bytes: int
    total_bytes: int
    peak_allocated_bytes: int = 0


class DeviceRuntime(abc.ABC):
    """One device's runtime as a worker sees it."""

    @abc.abstractmethod
    def device(self, index: int) -> torch.device:
        """The torch device for a local index."""

    @abc.abstractmethod
    def set_device(self, index: int) -> None:
        """Make `index` the current device of this process."""

    @abc.abstractmethod
    def device_name(self, index: int = 0) -> str:
        """A human-readable device name."""

    @abc.abstractmethod
    def memory_info(self) -> MemoryInfo:
        """Free, total and peak memory of the current device."""

    @abc.abstractmethod
    def allocated_bytes(self) -> int | None:
        """Bytes of the live allocations on the current device now (the allocator's count:
        freed blocks excluded), or None when this device cannot tell."""

    @abc.abstractmethod
    def reset_peak_memory(self) -> None:
        """Start a new peak-memory measurement."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait for all queued work on the current device."""

    @abc.abstractmethod
    def empty_cache(self) -> None:
        """Return cached, unused memory to the device."""

    @abc.abstractmethod
    def seed(self, seed: int) -> None:
        """Seed the device's random generators."""

    @abc.abstractmethod
    def current_stream(self) -> Any:
        """The current stream (an opaque handle on devices without streams)."""

    @abc.abstractmethod
    def runner_scope(self) -> AbstractContextManager[None]:
        """A context in which vLLM's GPU model runner's torch.cuda stream, event and graph
        calls reach this device's API (entered around the runner's construction and the
        calls that issue them; nothing stays patched outside it)."""

    def graphs(self) -> DeviceGraphs | None:
        """The device's graph capture and replay, or None on a device that captures none."""
        return None


class DeviceGraphs(abc.ABC):
    """Capture and replay of device graphs (NPU graphs): what a static graph wrapper needs.

    Handles (graphs, pools, streams) are opaque; a graph records the work issued on the
    capture stream inside `capture` and `replay` runs it again over the same memory.
    """

    @abc.abstractmethod
    def capture_stream(self) -> Any:
        """This process's dedicated, non-default stream, made current on first use (a
        device graph cannot be captured on the default stream); the same one after."""

    @abc.abstractmethod
    def pool(self) -> Any:
        """A new memory pool handle that graphs captured with it share."""

    @abc.abstractmethod
    def new_graph(self) -> Any:
        """An empty graph."""

    @abc.abstractmethod
    def capture(
        self, graph: Any, pool: Any, stream: Any, updatable: bool = False
    ) -> AbstractContextManager[None]:
        """A context whose work on `stream` is recorded into `graph` with memory from
        `pool`; `updatable` lets `update` change the attention ops' host-side lengths."""

    @abc.abstractmethod
    def replay(self, graph: Any) -> None:
        """Run the captured work again."""

    @abc.abstractmethod
    def update(self, graph: Any, host_arguments: list[dict[str, Any]]) -> None:
        """New host-side arguments for the updatable ops of `graph` (one dict per op, in
        capture order, or one for all). A replay runs each such op once its update has
        come (torch_npu's auto-dispatch capture puts a wait before it), so a caller may
        replay first and update while the replay's earlier work runs."""

    @abc.abstractmethod
    def weak_ref(self, tensor: torch.Tensor) -> torch.Tensor:
        """A tensor over the same memory that does not keep it alive."""
