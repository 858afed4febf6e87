"""LoRA: punica's two halves for a batch whose rows each use their own LoRA weights.

Weights are stacked per adapter slot: `lora_a` [L, R, H] (or [L, 1, R, H], vLLM's layout)
and `lora_b` [L, N, R] (or [L, 1, N, R]). `indices` [T] gives each row's slot, -1 for a
row without an adapter. Both ops are written without host syncs or shapes that depend
on the indices' values, so a captured graph or a Dynamo trace keeps them.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class LoraOps(abc.ABC):
    """Shrink (x -> rank) and expand (rank -> output columns), one adapter per row."""

    @abc.abstractmethod
    def shrink(
        self,
        out: torch.Tensor,
        x: torch.Tensor,
        lora_a: torch.Tensor,
        indices: torch.Tensor,
        scale: float,
    ) -> None:
        """out[t, :R] = scale * lora_a[indices[t]] @ x[t] (in out's dtype); rows with
        index -1 get zeros. out [T, >=R], x [T, H]."""

    @abc.abstractmethod
    def expand(
        self,
        out: torch.Tensor,
        x: torch.Tensor,
        lora_b: torch.Tensor,
        indices: torch.Tensor,
        offset: int,
        add: bool,
    ) -> None:
        """out[t, offset:offset+N] += lora_b[indices[t]] @ x[t] (or = when not `add`);
        rows with index -1 are left as they are. out [T, >=offset+N], x [T, R]."""
