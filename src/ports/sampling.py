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

    def top_k_top_p(
        self, logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None
    ) -> torch.Tensor | None:
        """Mask logits [B, V] in place to each row's k largest (k [B], None: no top-k),
        then to its top-p mass (p [B], None: no top-p), as vLLM's apply_top_k_top_p;
        masked entries -inf; returns the logits. None: the device has no kernel of its
        own for this call, and the caller keeps vLLM's torch implementation."""
        return None

    @abc.abstractmethod
    def exponential_noise(self, keys: torch.Tensor, vocab: int) -> torch.Tensor:
        """[B, vocab] float32 Exp(1) noise on the keys' device, row b a pure function of
        keys[b] (int64 [B]: a 32-bit key from a request's seed and the position it samples,
        adapters/torch/counter_noise.row_keys) and the token index: the same bits in any
        batch, step or graph replay, with no generator state."""
