"""Sampling: the token each sequence takes from its logits."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class SamplingOps(abc.ABC):
    """Sampling ops with one meaning across devices."""

    @abc.abstractmethod
    def greedy(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [B, V] -> [B] int64: each row's index of its maximum, as
        torch.argmax(dim=-1) answers (the first of ties; a NaN counts as the maximum)."""
