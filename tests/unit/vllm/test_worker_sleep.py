"""Sleep mode on the workers' runners, V1 and V2.

A sleep whose memory comes back at other addresses drops the captured graphs: the
pieces' (vLLM's CUDAGraphWrapper registry) and, on vLLM's V2 runner, the FULL graphs its
graph manager holds (release_graphs), so the capture on waking records them anew. And on
V2 only the model loader's call runs in the weights' pool: V2's load_model builds its
model state and sampler on the device after the model, which a level-2 sleep must not
discard with the weights.

The worker's method runs on a stand-in worker (its runner's graph manager a recording
fake); vLLM's own CudaGraphManager.release_graphs is checked to exist in
tests/integration/vllm/test_upstream_surface.py, and a whole V2 engine's sleeps on the
emulated NPU in tests/integration/npu/test_sleep_on_emulated_npu.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from types import SimpleNamespace
from unittest.mock import patch

import pytest
from vllm.compilation.cuda_graph import CUDAGraphWrapper
from vllm.v1.worker.gpu import model_runner as v2_model_runner

from adapters.vllm.worker.npu_model_runner_v2 import NpuModelRunnerV2
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


def test_on_v2_only_the_model_loaders_call_runs_in_the_weights_pool() -> None:
    events: list[str] = []

    class Loader:
        def load_model(self, **_: object) -> str:
            events.append("load")
            return "model"

    @contextmanager
    def pool() -> Iterator[None]:
        events.append("enter")
        yield
        events.append("exit")

    with (
        patch.object(v2_model_runner, "get_model_loader", lambda _config: Loader()),
        NpuModelRunnerV2._model_loads_in(pool),
    ):
        loader = v2_model_runner.get_model_loader(None)  # as V2's load_model calls it
        assert loader.load_model(vllm_config=None) == "model"
        events.append("model state, sampler")  # what V2's load_model builds next
    assert events == ["enter", "load", "exit", "model state, sampler"]


@pytest.mark.parametrize(("runner", "pooled"), [(SimpleNamespace(weights_pool=None), False),
                                                (SimpleNamespace(), True)])  # fmt: skip
def test_the_worker_leaves_the_weights_pool_to_a_runner_that_takes_it(
    runner: SimpleNamespace, pooled: bool
) -> None:
    memory = SimpleNamespace(allocation_pool=lambda tag: f"pool of {tag.value}")
    worker = SimpleNamespace(
        model_config=SimpleNamespace(enable_sleep_mode=True),
        model_runner=runner,
        _sleep_memory=lambda: memory,
    )
    context = DeviceWorker._maybe_get_memory_pool_context(worker, "weights")  # type: ignore[arg-type]
    assert (context == "pool of weights") if pooled else isinstance(context, nullcontext)
    kv = DeviceWorker._maybe_get_memory_pool_context(worker, "kv_cache")  # type: ignore[arg-type]
    assert kv == "pool of kv_cache"  # the KV cache's pool is the worker's on both runners
