"""The linear-attention port on an NPU (placeholder until the torch_npu binding lands):
the torch ops of adapters/gdn_torch.py on the device's tensors."""

from __future__ import annotations

from typing import Any

from adapters.gdn_torch import TorchLinearAttentionOps


class NpuLinearAttentionOps(TorchLinearAttentionOps):
    def __init__(self, torch_npu: Any) -> None:
        self._torch_npu = torch_npu
