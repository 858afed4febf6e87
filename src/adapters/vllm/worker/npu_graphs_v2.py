"""V2's graph manager on the runtime port's graphs: FULL graphs captured and replayed as
NPU graphs (torch_npu's NPUGraph on an NPU).

vLLM's V2 runner (vllm/v1/worker/gpu/model_runner.py) captures its FULL graphs itself,
through ModelCudaGraphManager (vllm/v1/worker/gpu/cudagraph_utils.py): torch.cuda.CUDAGraph
and torch.cuda.graph around one forward, replayed by run_fullgraph. On an NPU the
attention op inside a FULL graph reads its lengths from host lists recorded with it, so
the graph is captured updatable (torch_npu's auto-dispatch capture) and each replay gets
this step's host-side arguments (the update). PIECEWISE pieces are the compiled model's
own wrappers (the platform's NpuGraphWrapper); this manager leaves them to vLLM.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

import torch
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor, ModelCudaGraphManager

from adapters.vllm.worker.npu_model_runner import _host_arguments

if TYPE_CHECKING:
    from ports.runtime import DeviceGraphs


class NpuCudaGraphManager(ModelCudaGraphManager):
    """vLLM's V2 ModelCudaGraphManager: its capture and dispatch decisions unchanged, its
    FULL graphs made, captured (updatable) and replayed through `DeviceGraphs`."""

    graphs_port: DeviceGraphs  # set by `manager_on`
    step_metadata: Callable[[], Any]  # this step's attention metadata (the runner's)

    # vLLM's ModelCudaGraphManager.capture itself takes the model, not a forward factory.
    def capture(self, model: Any, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self._layers = frozenset(
            name for m in model.modules() if isinstance(name := getattr(m, "layer_name", None), str)
        )
        port = self.graphs_port

        @contextmanager
        def graph(g: Any, pool: Any = None, stream: Any = None, **_: Any) -> Iterator[None]:
            with port.capture(g, pool, stream, updatable=True):
                yield

        with (
            patch.object(torch.cuda, "CUDAGraph", port.new_graph),
            patch.object(torch.cuda, "graph", graph),
        ):
            super().capture(model, *args, **kwargs)

    def run_fullgraph(self, desc: BatchExecutionDescriptor) -> Any:
        """Replay the FULL graph, then give its attention ops this step's host lengths (the
        replay waits at each such op for its update)."""
        output = super().run_fullgraph(desc)
        arguments = _host_arguments(self.step_metadata(), self._layers)
        self.graphs_port.update(self.graphs[desc], arguments)
        return output


def manager_on(graphs: DeviceGraphs, step_metadata: Callable[[], Any]) -> type:
    """NpuCudaGraphManager bound to the runtime's graphs and the runner's step metadata,
    constructed by V2's initialize_kv_cache with vLLM's own arguments."""
    return type(
        "NpuCudaGraphManager",
        (NpuCudaGraphManager,),
        {"graphs_port": graphs, "step_metadata": staticmethod(step_metadata)},
    )
