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


def _in_scope(name: str) -> Any:
    """GPUModelRunner.<name>, called inside the runtime's runner_scope."""

    def call(self: NpuModelRunner, *args: Any, **kwargs: Any) -> Any:
        with self._runtime.runner_scope():
            return getattr(GPUModelRunner, name)(self, *args, **kwargs)

    call.__name__ = name
    call.__doc__ = f"GPUModelRunner.{name} with torch.cuda bound to the device's API."
    return call


class NpuModelRunner(GPUModelRunner):
    """GPUModelRunner on an NPU; only the entry points that issue torch.cuda calls are wrapped."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device, runtime: DeviceRuntime):
        self._runtime = runtime
        with runtime.runner_scope():
            super().__init__(vllm_config, device)

    # Each of these creates or waits on streams and events (the async output copy, the
    # transfer event of the sampled ids, the dummy and profiling batches, graph capture).
    execute_model = _in_scope("execute_model")
    sample_tokens = _in_scope("sample_tokens")
    profile_run = _in_scope("profile_run")
    capture_model = _in_scope("capture_model")
    initialize_kv_cache = _in_scope("initialize_kv_cache")
