"""What both devices' weight-only int8 port (ports/weight_quant.py) prepare alike."""

from __future__ import annotations

import torch

_F32 = torch.float32


def channel_vectors(
    weight: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-channel scale and offset as [n] float32 vectors holding values rounded to the
    activations' dtype (the NPU op takes them in x's dtype; the doctor's weight figure counts
    int8 layers' scales in float32). ValueError unless `weight` is int8 [n, k]."""
    if weight.dtype != torch.int8 or weight.dim() != 2:
        raise ValueError(f"weight-only weight must be int8 [n, k], not {weight.dtype} "
                         f"{tuple(weight.shape)}")
    n = weight.shape[0]
    return (scale.to(_F32).reshape(n).to(dtype).to(_F32),
            offset.to(_F32).reshape(n).to(dtype).to(_F32))
