"""The LoRA port's contract in torch ops, which both device adapters run: every slot's
product, then each row takes its own slot's.

Computing all L slots (L = max_loras, a handful) costs L small GEMMs but needs no host
sync and no shape that depends on the indices, so Dynamo traces it once and a graph
captures it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ports.lora import LoraOps

if TYPE_CHECKING:
    import torch


def _stacked(weights: torch.Tensor) -> torch.Tensor:
    """[L, 1, O, I] (vLLM's layout) or [L, O, I] -> [L, O, I]."""
    return weights.squeeze(1) if weights.dim() == 4 else weights


def _per_row(x: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """[T, O]: row t times weights[indices[t]] (slot 0 for -1 rows: masked by callers)."""
    import torch

    every_slot = torch.einsum("ti,loi->lto", x, weights)  # [L, T, O]
    rows = torch.arange(x.shape[0], device=x.device)
    return every_slot[indices.clamp(min=0), rows]


class TorchLoraOps(LoraOps):
    """Plain torch on the tensors' device, computed in the output's dtype."""

    def shrink(
        self,
        out: torch.Tensor,
        x: torch.Tensor,
        lora_a: torch.Tensor,
        indices: torch.Tensor,
        scale: float,
    ) -> None:
        weights = _stacked(lora_a).to(out.dtype)
        rows = x.shape[0]
        product = _per_row(x.to(out.dtype), weights, indices[:rows]) * scale
        has_adapter = (indices[:rows] >= 0).unsqueeze(-1)
        out[:rows, : weights.shape[1]] = product.masked_fill(~has_adapter, 0)

    def expand(
        self,
        out: torch.Tensor,
        x: torch.Tensor,
        lora_b: torch.Tensor,
        indices: torch.Tensor,
        offset: int,
        add: bool,
    ) -> None:
        import torch

        weights = _stacked(lora_b).to(out.dtype)
        rows = x.shape[0]
        width = min(weights.shape[1], out.shape[1] - offset)
        product = _per_row(x.to(out.dtype), weights[:, :width], indices[:rows])
        has_adapter = (indices[:rows] >= 0).unsqueeze(-1)
        target = out[:rows, offset : offset + width]
        new = target + product if add else product
        target.copy_(torch.where(has_adapter, new, target))
