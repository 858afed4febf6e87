"""The NPU model runner on vLLM's Model Runner V2 (vllm/v1/worker/gpu/model_runner.py).

Chosen when the plan's runner decision says V2 (VLLM_USE_V2_MODEL_RUNNER=1 on the NPU,
ascend_core.plan.model_runner). V2 keeps the batch state on the device and prepares
inputs, samples and counts with Triton kernels (ascend_core.v2_kernels lists them): on an
NPU host triton-ascend compiles them; on the emulated NPU Triton's interpreter runs them
(TRITON_INTERPRET=1). What differs from a GPU is bound here, inside the runtime's
`runner_scope` (torch.cuda's stream, event, sync and graph names on the device's API):

- V2's staging buffers are UVA views of pinned host memory (a vLLM CUDA op); an NPU has
  no such view, so V2's own explicit-copy buffers (NonUvaBuffer) serve instead.
- V2's graph manager is NpuCudaGraphManager (npu_graphs_v2.py): FULL graphs through the
  runtime port's graphs, captured updatable, each replay given the step's attention
  lengths (read from the metadata this runner's model state last prepared). PIECEWISE
  graphs are the compiled model's pieces in the platform's NpuGraphWrapper, as on V1.
- A FULL decode graph records its rows' logits (npu_graphs_v2.py); a step that replayed
  one and whose rows are exactly its requests (one token each, no drafts) samples from
  those (`sample`): no gather of the rows and no LM head matmul after the replay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

from vllm.v1.worker.gpu import buffer_utils
from vllm.v1.worker.gpu import model_runner as v2_model_runner
from vllm.v1.worker.gpu.model_runner import GPUModelRunner as GPUModelRunnerV2

from adapters.vllm.worker.npu_graphs_v2 import manager_on

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig

    from ports.runtime import DeviceRuntime


def _no_uva() -> bool:
    """An NPU maps no pinned host memory into the device's address space."""
    return False


def _in_scope(name: str) -> Callable[..., Any]:
    """GPUModelRunnerV2.<name>, called inside the runner's scope."""

    def call(self: NpuModelRunnerV2, *args: Any, **kwargs: Any) -> Any:
        with self._scope():
            return getattr(GPUModelRunnerV2, name)(self, *args, **kwargs)

    call.__name__ = name
    call.__doc__ = f"vLLM's V2 GPUModelRunner.{name} inside the NPU runner's scope."
    return call


class NpuModelRunnerV2(GPUModelRunnerV2):
    """vLLM's V2 GPUModelRunner on an NPU: its math, buffers and kernels unchanged; the
    entry points that touch torch.cuda or build staging buffers run in `_scope`."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device, runtime: DeviceRuntime):
        self._runtime = runtime
        self._step_metadata: Any = None
        self.graph_logits_steps = 0  # steps sampled from a FULL graph's logits
        with self._scope():
            super().__init__(vllm_config, device)

    @contextmanager
    def _scope(self) -> Iterator[None]:
        """torch.cuda's names on the device's API, and V2's buffers without UVA."""
        with self._runtime.runner_scope(), patch.object(buffer_utils, "is_uva_available", _no_uva):
            yield

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """V2's load_model; the attention metadata its model state prepares for a step is
        kept for the FULL graph's replay (V2 replays with no forward context)."""
        with self._scope():
            GPUModelRunnerV2.load_model(self, *args, **kwargs)
        prepare = self.model_state.prepare_attn

        def prepare_attn(*a: Any, **kw: Any) -> Any:
            self._step_metadata = prepare(*a, **kw)
            return self._step_metadata

        self.model_state.prepare_attn = prepare_attn  # type: ignore[method-assign]

    def initialize_kv_cache(self, *args: Any, **kwargs: Any) -> None:
        """V2's initialize_kv_cache, its graph manager on the runtime port's graphs."""
        graphs = self._runtime.graphs()
        with ExitStack() as stack:
            stack.enter_context(self._scope())
            if graphs is not None:  # a device without graphs serves eager only
                manager = manager_on(graphs, lambda: self._step_metadata)
                stack.enter_context(patch.object(v2_model_runner, "ModelCudaGraphManager", manager))
            GPUModelRunnerV2.initialize_kv_cache(self, *args, **kwargs)

    def execute_model(self, *args: Any, **kwargs: Any) -> Any:
        """V2's execute_model inside the scope; a FULL replay's logits are this step's only."""
        manager = getattr(self, "cudagraph_manager", None)
        if manager is not None and hasattr(manager, "last_logits"):
            manager.last_logits = None
        with self._scope():
            return GPUModelRunnerV2.execute_model(self, *args, **kwargs)

    def sample(self, hidden_states: Any, input_batch: Any, grammar_output: Any) -> Any:
        """V2's sample; from the logits the FULL decode graph recorded where they are the
        ones V2 would compute (`_graph_logits`), with no gather and no matmul."""
        logits = self._graph_logits(hidden_states, input_batch)
        if logits is None:
            return GPUModelRunnerV2.sample(self, hidden_states, input_batch, grammar_output)
        rows = input_batch.num_reqs
        self.graph_logits_steps += 1
        with patch.object(self.model, "compute_logits", lambda _rows: logits[:rows]):
            return GPUModelRunnerV2.sample(self, _GraphRows(), input_batch, grammar_output)

    def _graph_logits(self, hidden_states: Any, input_batch: Any) -> Any:
        """The logits this step's FULL replay recorded, where V2's rows to sample are the
        graph's first rows: one token a request (its logits indices are 0..n-1), no
        drafts, the hidden states the replay's, no batch-sharded sampling."""
        manager = getattr(self, "cudagraph_manager", None)
        logits = getattr(manager, "last_logits", None)
        if (
            logits is None
            or self.batch_sharder is not None
            or self.pcp_manager is not None
            or input_batch.num_draft_tokens != 0
            or input_batch.num_tokens != input_batch.num_reqs
            or input_batch.num_reqs > logits.shape[0]
            or hidden_states.data_ptr() != manager.hidden_states.data_ptr()
        ):
            return None
        return logits

    profile_run = _in_scope("profile_run")
    capture_model = _in_scope("capture_model")
    profile_cudagraph_memory = _in_scope("profile_cudagraph_memory")
    sample_tokens = _in_scope("sample_tokens")


class _GraphRows:
    """Stands for V2's hidden states in `sample` when the graph's logits serve: V2 picks
    its rows (`hidden_states[logits_indices]`) only to hand them to compute_logits."""

    def __getitem__(self, _index: Any) -> _GraphRows:
        return self
