"""RMS norms as DeepSeek-V4 computes them, through the device's ops port (Ops.rms_norm:
float32 inside, the weight applied in float32, one rounding to x's dtype)."""

from __future__ import annotations

import torch

from ports.ops import Ops


def rms_norm(ops: Ops, x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """x / rms(x) over the last dim, times weight when given (ones otherwise: V4's per-head
    query norm and its hyper-connections' norm have none), in x's dtype."""
    if weight is None:
        weight = torch.ones(x.shape[-1], dtype=x.dtype, device=x.device)
    return ops.rms_norm(x, weight.to(x.dtype), eps)
