"""A device's graphs with the parameter update forgotten: what a backend that skips it does."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from ports.runtime import DeviceGraphs, DeviceRuntime
from unit.fakes.recording_runtime import RecordingRuntime


class StaleArgumentGraphs(DeviceGraphs):
    """The real graphs, except that nothing is captured as updatable and `update` does
    nothing: each replay runs the attention op with the host-side lengths it was
    captured with (on the emulated device as on hardware)."""

    def __init__(self, inner: DeviceGraphs) -> None:
        self.inner = inner
        self.updates_dropped = 0

    def capture_stream(self) -> Any:
        return self.inner.capture_stream()

    def pool(self) -> Any:
        return self.inner.pool()

    def new_graph(self) -> Any:
        return self.inner.new_graph()

    def capture(
        self, graph: Any, pool: Any, stream: Any, updatable: bool = False
    ) -> AbstractContextManager[None]:
        return self.inner.capture(graph, pool, stream, updatable=False)

    def replay(self, graph: Any) -> None:
        self.inner.replay(graph)

    def update(self, graph: Any, host_arguments: list[dict[str, Any]]) -> None:
        self.updates_dropped += 1

    def weak_ref(self, tensor: Any) -> Any:
        return self.inner.weak_ref(tensor)


class StaleGraphsRuntime(RecordingRuntime):
    """The real runtime whose graphs are StaleArgumentGraphs; anything else the real
    runtime offers (its facts, its chip family) is passed through."""

    def __init__(self, inner: DeviceRuntime) -> None:
        super().__init__(inner, [])
        real = inner.graphs()
        self._graphs = None if real is None else StaleArgumentGraphs(real)

    def graphs(self) -> StaleArgumentGraphs | None:
        return self._graphs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
