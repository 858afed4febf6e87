"""The NPU model runner on vLLM's Model Runner V2 (vllm/v1/worker/gpu/model_runner.py).

Chosen when the plan's runner decision says V2 (VLLM_USE_V2_MODEL_RUNNER=1 on the NPU,
ascend_core.plan.model_runner). V2 keeps the batch state on the device and prepares
inputs, samples and counts with Triton kernels (ascend_core.v2_kernels lists them): on an
NPU host triton-ascend compiles them; on the emulated NPU Triton's interpreter runs them
(TRITON_INTERPRET=1). What differs from a GPU is bound here, inside the runtime's
`runner_scope` (torch.cuda's stream, event, sync and graph names on the device's API):

- V2's staging buffers are UVA views of pinned host memory (a vLLM CUDA op); an NPU has
  no such view, so V2's own explicit-copy buffers (NonUvaBuffer) serve instead.

Graphs: this runner serves eager (enforce_eager); V2's graph manager on the runtime
port's graphs is not built yet (the plan refuses graphs with V2, with its reason).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

from vllm.v1.worker.gpu import buffer_utils
from vllm.v1.worker.gpu.model_runner import GPUModelRunner as GPUModelRunnerV2

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
        with self._scope():
            super().__init__(vllm_config, device)

    @contextmanager
    def _scope(self) -> Iterator[None]:
        """torch.cuda's names on the device's API, and V2's buffers without UVA."""
        with self._runtime.runner_scope(), patch.object(buffer_utils, "is_uva_available", _no_uva):
            yield

    load_model = _in_scope("load_model")
    initialize_kv_cache = _in_scope("initialize_kv_cache")
    profile_run = _in_scope("profile_run")
    capture_model = _in_scope("capture_model")
    profile_cudagraph_memory = _in_scope("profile_cudagraph_memory")
    execute_model = _in_scope("execute_model")
    sample_tokens = _in_scope("sample_tokens")
