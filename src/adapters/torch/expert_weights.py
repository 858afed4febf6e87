"""What both devices' quantized grouped MLPs require of the int8 expert weights vLLM loads."""

from __future__ import annotations

import torch


def check_int8_experts(w13: torch.Tensor, w2: torch.Tensor) -> None:
    """A ValueError unless w13 and w2 are int8 [E, out, in] (vLLM's expert layout)."""
    for name, w in (("w13", w13), ("w2", w2)):
        if w.dtype != torch.int8 or w.dim() != 3:
            raise ValueError(f"quantized expert weight {name} must be int8 [E, out, in], "
                             f"not {w.dtype} {tuple(w.shape)}")
