"""FakeSamplingOps: the sampling port as torch's argmax, recording each call's shape."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ports.sampling import SamplingOps

if TYPE_CHECKING:
    import torch


class FakeSamplingOps(SamplingOps):
    """Greedy is logits.argmax(dim=-1); `greedy_calls` holds each call's logits shape."""

    def __init__(self) -> None:
        self.greedy_calls: list[tuple[int, ...]] = []

    def greedy(self, logits: torch.Tensor) -> torch.Tensor:
        self.greedy_calls.append(tuple(logits.shape))
        return logits.argmax(dim=-1).view(-1)

    def exponential_noise(self, keys: torch.Tensor, vocab: int) -> torch.Tensor:
        """Ones: every token's noise equal, so a random row samples its argmax."""
        import torch

        return torch.ones(keys.shape[0], vocab, dtype=torch.float32, device=keys.device)
