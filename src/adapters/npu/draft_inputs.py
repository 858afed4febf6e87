"""A draft model's input bookkeeping on the NPU: the host's torch ops on the NPU's tensors.

vLLM's EAGLE input kernels are Triton written for CUDA; until kernels of our own are
lowered for Ascend, the draft's inputs are prepared by torch ops on the device (no host
read-back), the host's as the reference. torch_npu is injected for the contract every
NPU adapter keeps; no torch_npu op is needed here.
"""

from __future__ import annotations

from types import ModuleType

from adapters.draft_inputs import TorchDraftInputOps


class NpuDraftInputOps(TorchDraftInputOps):
    def __init__(self, torch_npu: ModuleType) -> None:
        self._torch_npu = torch_npu
