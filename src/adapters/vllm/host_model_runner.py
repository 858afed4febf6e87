"""The host model runner: vLLM's CPU adaptation of its GPU model runner, unchanged in its math.

Attention and the custom ops are ours (selected by the platform); this class only
keeps the tensor bookkeeping on the host. The NPU's runner is npu_model_runner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm.logger import init_logger
from vllm.utils.mem_utils import DeviceMemoryProfiler, format_gib
from vllm.v1.worker.cpu_model_runner import CPUModelRunner

from adapters.vllm.patches.host_linear import prepack_weights

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig

    from ports.runtime import DeviceRuntime

logger = init_logger(__name__)


class HostModelRunner(CPUModelRunner):
    """vLLM's CPUModelRunner (GPUModelRunner with host buffers), without vLLM's compiled ops."""

    def __init__(self, vllm_config: VllmConfig, device: torch.device, runtime: DeviceRuntime):
        super().__init__(vllm_config, device)

    def load_model(self, load_dummy_weights: bool = False) -> None:
        """vLLM's CPU load, measured as its GPU runner measures it: the change of the
        platform's memory usage (the runtime port's allocated bytes) across the load."""
        with DeviceMemoryProfiler() as m:
            super().load_model(load_dummy_weights)
        self.model_memory_usage = int(m.consumed_memory)
        logger.info_once("Model loading took %s GiB memory", format_gib(self.model_memory_usage))
        # The host GEMM's packed weights, now rather than in the first forward (the
        # profiling run, which counts them as it did before).
        prepack_weights(self.model)
