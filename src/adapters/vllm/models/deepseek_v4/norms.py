"""RMS norms as DeepSeek-V4 computes them (float32 inside, the weight applied in float32)."""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """x / rms(x) over the last dim, times weight when given, in x's dtype."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        h = weight.float() * h
    return h.to(x.dtype)
