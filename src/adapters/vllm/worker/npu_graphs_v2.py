"""V2's graph manager on the runtime port's graphs: FULL graphs captured and replayed as
NPU graphs (torch_npu's NPUGraph on an NPU).

vLLM's V2 runner (vllm/v1/worker/gpu/model_runner.py) captures its FULL graphs itself,
through ModelCudaGraphManager (vllm/v1/worker/gpu/cudagraph_utils.py): torch.cuda.CUDAGraph
and torch.cuda.graph around one forward, replayed by run_fullgraph. On an NPU the
attention op inside a FULL graph reads its lengths from host lists recorded with it, so
the graph is captured updatable (torch_npu's auto-dispatch capture) and each replay gets
this step's host-side arguments (the update). PIECEWISE pieces are the compiled model's
own wrappers (the platform's NpuGraphWrapper); this manager leaves them to vLLM.

A FULL decode graph (one token a request) also records the logits of its rows after the
model, into a buffer kept beside V2's hidden states: vLLM's V2 computes them after the
replay (a gather of the rows and the LM head's matmul, two host launches a step), and the
NPU's V2 runner samples from the graph's where a step's rows are exactly its requests
(NpuModelRunnerV2.sample). After the logits the graph records the greedy tail
(v2_decode_tail.py: the rows' greedy ids and V2's post-step update, which write only
where the step's host-sent counts say so); a plain greedy step takes its ids from there,
any other keeps V2's sampler outside the graph. Before the model such a graph records
the gather of its rows' input ids from the requests' last sampled tokens (where the
host-sent flags say so), in place of V2's `_combine_sampled_and_draft_tokens_kernel`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

import torch
from vllm.v1.worker.gpu.cudagraph_utils import (
    BatchExecutionDescriptor,
    CudaGraphManager,
    ModelCudaGraphManager,
)

from adapters.vllm.worker.npu_model_runner import graph_update_arguments

if TYPE_CHECKING:
    from adapters.vllm.worker.v2_decode_tail import V2DecodeTail
    from ports.runtime import DeviceGraphs


class NpuCudaGraphManager(ModelCudaGraphManager):
    """vLLM's V2 ModelCudaGraphManager: its capture and dispatch decisions unchanged, its
    FULL graphs made, captured (updatable) and replayed through `DeviceGraphs`."""

    graphs_port: DeviceGraphs  # set by `manager_on`
    step_metadata: Callable[[], Any]  # this step's attention metadata (the runner's)
    logits: torch.Tensor | None = None  # the FULL decode graphs' logits rows (capture)
    logits_graphs: frozenset[BatchExecutionDescriptor] | set[BatchExecutionDescriptor] = (
        frozenset()
    )
    last_logits: torch.Tensor | None = None  # this step's replay's logits, if it has any
    tail: V2DecodeTail | None = None  # the greedy tail, recorded after the logits (runner's)

    # vLLM's ModelCudaGraphManager.capture itself takes the model, not a forward factory.
    def capture(self, model: Any, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self._layers = frozenset(
            name for m in model.modules() if isinstance(name := getattr(m, "layer_name", None), str)
        )
        port = self.graphs_port
        self.logits = None
        self.logits_graphs = set()
        self.last_logits = None
        if self.tail is not None:
            self.tail.recorded.clear()
            self.tail.ids_recorded.clear()
        capturing: list[BatchExecutionDescriptor] = []
        manager = self

        @contextmanager
        def graph(g: Any, pool: Any = None, stream: Any = None, **_: Any) -> Iterator[None]:
            desc = capturing[-1]
            with_logits = manager._records_logits(model, desc)
            with port.capture(g, pool, stream, updatable=True):
                if with_logits and manager.tail is not None:  # before the model
                    assert manager.logits is not None
                    manager.tail.record_inputs(desc, desc.num_tokens, manager.logits.shape[1])
                yield
                if with_logits:  # after the model, inside the capture: recorded in g
                    manager._capture_logits(model, desc)

        create_capture = CudaGraphManager.capture

        def recording(mgr: Any, create_forward_fn: Any, *a: Any, **kw: Any) -> None:
            """vLLM's capture loop, each forward factory call noting the graph's shape."""

            def create(desc: BatchExecutionDescriptor, warmup: bool) -> Any:
                capturing.append(desc)
                return create_forward_fn(desc, warmup)

            create_capture(mgr, create, *a, **kw)

        with (
            patch.object(torch.cuda, "CUDAGraph", port.new_graph),
            patch.object(torch.cuda, "graph", graph),
            patch.object(CudaGraphManager, "capture", recording),
        ):
            super().capture(model, *args, **kwargs)

    def _records_logits(self, model: Any, desc: BatchExecutionDescriptor) -> bool:
        """Whether the FULL graph of `desc` records its rows' logits: a decode graph of
        one token a request on the last pipeline rank of a generating model, its hidden
        states alone the model's output (no drafter's auxiliary states)."""
        if not (
            desc.uniform_token_count == 1
            and self.is_last_pp_rank
            and not self.use_aux_hidden_state_outputs
            and self.hidden_states is not None
            and hasattr(model, "compute_logits")
        ):
            return False
        if self.logits is None:  # sized once, outside any capture (a warmup's rows)
            probe = model.compute_logits(self.hidden_states[:1])
            if not isinstance(probe, torch.Tensor):  # a rank the logits are gathered from
                return False
            rows = self.hidden_states.shape[0]
            self.logits = torch.empty((rows, *probe.shape[1:]), dtype=probe.dtype,
                                      device=probe.device)  # fmt: skip
        return True

    def _capture_logits(self, model: Any, desc: BatchExecutionDescriptor) -> None:
        assert self.logits is not None and self.hidden_states is not None
        rows = desc.num_tokens
        self.logits[:rows].copy_(model.compute_logits(self.hidden_states[:rows]))
        self.logits_graphs.add(desc)  # type: ignore[union-attr]
        if self.tail is not None:
            self.tail.record(desc, self.logits[:rows])

    def run_fullgraph(self, desc: BatchExecutionDescriptor) -> Any:
        """Replay the FULL graph, then give its attention ops this step's host lengths (the
        replay waits at each such op for its update); the logits it recorded, if any, are
        this step's (`last_logits`, rows of the padded batch)."""
        tail = self.tail
        if tail is not None and (desc in tail.recorded or desc in tail.ids_recorded):
            tail.before_replay()
        output = super().run_fullgraph(desc)
        arguments = graph_update_arguments(self.step_metadata(), self._layers)
        self.graphs_port.update(self.graphs[desc], arguments)
        recorded = desc in self.logits_graphs and self.logits is not None
        self.last_logits = self.logits[: desc.num_tokens] if recorded else None  # type: ignore[index]
        return output


def manager_on(graphs: DeviceGraphs, step_metadata: Callable[[], Any]) -> type:
    """NpuCudaGraphManager bound to the runtime's graphs and the runner's step metadata,
    constructed by V2's initialize_kv_cache with vLLM's own arguments."""
    return type(
        "NpuCudaGraphManager",
        (NpuCudaGraphManager,),
        {"graphs_port": graphs, "step_metadata": staticmethod(step_metadata)},
    )
