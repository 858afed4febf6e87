"""The NPU model runner: vLLM's GPU model runner with torch.cuda's calls on torch_npu.

The pattern of vLLM's own XPU runner: the GPU runner unchanged in its math and buffers
(device tensors with pinned host staging and non-blocking copies), constructed and run
inside the runtime's `runner_scope`, which binds the torch.cuda stream, event and graph
names it calls to the device's API and restores them on exit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllm.v1.worker.gpu_model_runner import GPUModelRunner

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig

    from ports.runtime import DeviceRuntime


class NpuModelRunner(GPUModelRunner):
    """GPUModelRunner on an NPU; only the entry points that issue torch.cuda calls are wrapped."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device, runtime: DeviceRuntime):
        self._runtime = runtime
        with runtime.runner_scope():
            super().__init__(vllm_config, device)

    # Each of these creates or waits on streams and events (the async output copy, the
    # transfer event of the sampled ids, the dummy and profiling batches, graph capture).
    def execute_model(self, *args: Any, **kwargs: Any) -> Any:
        with self._runtime.runner_scope():
            return super().execute_model(*args, **kwargs)

    def sample_tokens(self, *args: Any, **kwargs: Any) -> Any:
        with self._runtime.runner_scope():
            return super().sample_tokens(*args, **kwargs)

    def profile_run(self, *args: Any, **kwargs: Any) -> Any:
        with self._runtime.runner_scope():
            return super().profile_run(*args, **kwargs)

    def capture_model(self, *args: Any, **kwargs: Any) -> Any:
        with self._runtime.runner_scope():
            return super().capture_model(*args, **kwargs)

    def initialize_kv_cache(self, *args: Any, **kwargs: Any) -> Any:
        with self._runtime.runner_scope():
            return super().initialize_kv_cache(*args, **kwargs)
