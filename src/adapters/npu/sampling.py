"""The sampling port on the NPU: torch's argmax on the device."""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.torch import counter_noise
from ports.sampling import SamplingOps

if TYPE_CHECKING:
    import torch


class NpuSamplingOps(SamplingOps):
    """Greedy: logits.argmax(dim=-1) on the device, as vLLM's sampler takes it."""

    def greedy(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(dim=-1).view(-1)

    def exponential_noise(self, keys: torch.Tensor, vocab: int) -> torch.Tensor:
        return counter_noise.exponential_noise(keys, vocab)
