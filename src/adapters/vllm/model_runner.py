"""The host model runner: vLLM's CPU adaptation of its GPU model runner, unchanged in its math.

Attention and the custom ops are ours (selected by the platform); this class only
keeps the tensor bookkeeping on the host. The NPU's runner is npu_model_runner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm.v1.worker.cpu_model_runner import CPUModelRunner

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig

    from ports.runtime import DeviceRuntime


class HostModelRunner(CPUModelRunner):
    """vLLM's CPUModelRunner (GPUModelRunner with host buffers), without vLLM's compiled ops."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device, runtime: DeviceRuntime):
        super().__init__(vllm_config, device)
