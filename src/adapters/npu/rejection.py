"""The rejection sampler on the NPU: the same torch ops as the host, on the NPU's tensors.

vLLM's rejection kernels are Triton written for CUDA; until a kernel of our own is
lowered for Ascend, verification runs as torch ops on the device (no host read-back),
with the host's ops as the reference. torch_npu is injected for the contract every NPU
adapter keeps; no torch_npu op is needed here.
"""

from __future__ import annotations

from types import ModuleType

from adapters.draft_verification import TorchRejectionOps


class NpuRejectionOps(TorchRejectionOps):
    def __init__(self, torch_npu: ModuleType) -> None:
        self._torch_npu = torch_npu
