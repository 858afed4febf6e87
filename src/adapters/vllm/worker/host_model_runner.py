"""The host model runner: vLLM's CPU adaptation of its GPU model runner, unchanged in its math.

Attention and the custom ops are ours (selected by the platform); this class only
keeps the tensor bookkeeping on the host. The NPU's runner is npu_model_runner.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from vllm.logger import init_logger
from vllm.utils.mem_utils import DeviceMemoryProfiler, format_gib
from vllm.v1.worker.cpu_model_runner import CPUModelRunner

from adapters.vllm.patches.host_linear import prepack_weights
from adapters.vllm.worker.seeded_rewind import SampleCountersMixin, SeededRewindMixin

if TYPE_CHECKING:
    from vllm.config import VllmConfig

    from ports.runtime import DeviceRuntime

logger = init_logger(__name__)


class HostModelRunner(SampleCountersMixin, SeededRewindMixin, CPUModelRunner):
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
        self._register_eplb()

    def _register_eplb(self) -> None:
        """--enable-eplb: the MoE model's EPLB state, as GPUModelRunner.load_model makes it
        (vLLM's CPU runner loads without it); its steps, rebalances and the expert weights'
        moves over the EP group's gloo are then vLLM's own."""
        if not self.parallel_config.enable_eplb:
            return
        from vllm.distributed.eplb.eplb_state import EplbState
        from vllm.model_executor.models.interfaces import get_mixture_of_experts_model

        moe_model = get_mixture_of_experts_model(self.model)
        if moe_model is None:
            return
        self.eplb_state = EplbState(self.parallel_config, self.device)
        self.eplb_state.add_model(moe_model, self.model_config)
        self._moe_model = moe_model

    # With a draft model (eagle, eagle3, mtp, draft_model) the GPU runner copies the draft
    # tokens (and, scheduling asynchronously, the valid-token counts) to the host on a
    # side CUDA stream, naming torch.cuda.current_stream and torch.cuda.stream at each
    # step; vLLM's CPU runner maps only the stream and event classes (at construction).
    # On the host the copy is a plain one, so those two calls become no-ops around it.

    def _copy_draft_token_ids_to_cpu(self, scheduler_output: Any, zeros_only: bool = False) -> None:
        with _host_streams():
            super()._copy_draft_token_ids_to_cpu(scheduler_output, zeros_only)

    def _copy_valid_sampled_token_count(self, *args: Any, **kwargs: Any) -> Any:
        with _host_streams():
            return super()._copy_valid_sampled_token_count(*args, **kwargs)


@contextlib.contextmanager
def _host_streams() -> Iterator[None]:
    """torch.cuda.current_stream and torch.cuda.stream as no-ops, for one call."""
    cuda = torch.cuda
    saved = cuda.current_stream, cuda.stream

    def current_stream(device: Any = None) -> None:
        return None

    def stream(s: Any) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    cuda.current_stream, cuda.stream = current_stream, stream  # type: ignore[assignment]
    try:
        yield
    finally:
        cuda.current_stream, cuda.stream = saved  # type: ignore[assignment]
