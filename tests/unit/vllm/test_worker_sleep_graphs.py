"""A sleep whose memory comes back at other addresses drops the captured graphs: the
pieces' (vLLM's CUDAGraphWrapper registry) and, on vLLM's V2 runner, the FULL graphs its
graph manager holds (release_graphs), so the capture on waking records them anew.

The worker's method runs on a stand-in worker (its runner's graph manager a recording
fake); vLLM's own CudaGraphManager.release_graphs is checked to exist in
tests/integration/vllm/test_upstream_surface.py, and a whole V2 engine's sleeps on the
emulated NPU in tests/integration/npu/test_sleep_on_emulated_npu.py.
"""

from __future__ import annotations

from types import SimpleNamespace
from unittest.mock import patch

import pytest
from vllm.compilation.cuda_graph import CUDAGraphWrapper

from adapters.vllm.worker.worker import DeviceWorker


class _GraphManager:
    """V2's graph manager as the worker sees it: how often its graphs were released."""

    def __init__(self) -> None:
        self.released = 0

    def release_graphs(self) -> None:
        self.released += 1


def _worker(v2: bool, manager: _GraphManager) -> SimpleNamespace:
    return SimpleNamespace(
        _graphs_dropped=False,
        _graphs_captured=lambda: True,
        use_v2_model_runner=v2,
        model_runner=SimpleNamespace(cudagraph_manager=manager),
    )


@pytest.mark.parametrize(
    ("v2", "addresses_kept", "released", "cleared"),
    [
        (True, False, 1, 1),  # V2, memory moves: its FULL graphs and the pieces dropped
        (True, True, 0, 0),  # addresses kept (the NPU's pool): every graph stays
        (False, False, 0, 1),  # V1: its graphs are all in the wrappers
    ],
)
def test_a_sleep_that_moves_memory_drops_the_runners_graphs(
    v2: bool, addresses_kept: bool, released: int, cleared: int
) -> None:
    manager = _GraphManager()
    worker = _worker(v2, manager)
    with patch.object(CUDAGraphWrapper, "clear_all_graphs") as clear:
        DeviceWorker._drop_graphs_if_moved(worker, addresses_kept)  # type: ignore[arg-type]
    assert (manager.released, clear.call_count) == (released, cleared)
    # Waking captures again exactly where something was dropped.
    assert worker._graphs_dropped is (not addresses_kept)
