"""What both devices' quantized grouped MLPs require of the int8 expert weights vLLM loads,
and the unpacking of ModelSlim's int4 pairs (W4A8_DYNAMIC experts)."""

from __future__ import annotations

import torch


def check_int8_experts(w13: torch.Tensor, w2: torch.Tensor) -> None:
    """A ValueError unless w13 and w2 are int8 [E, out, in] (vLLM's expert layout)."""
    for name, w in (("w13", w13), ("w2", w2)):
        if w.dtype != torch.int8 or w.dim() != 3:
            raise ValueError(f"quantized expert weight {name} must be int8 [E, out, in], "
                             f"not {w.dtype} {tuple(w.shape)}")


def unpack_int4_pairs(packed: torch.Tensor) -> torch.Tensor:
    """int8 [..., R, C] holding two int4 per byte along R (even row in the low nibble) ->
    the signed values as int8 [..., 2R, C]."""
    v = packed.to(torch.int16)
    low = ((v & 0xF) ^ 8) - 8
    high = v >> 4  # arithmetic: the high nibble with its sign
    pairs = torch.stack((low, high), dim=-2)  # [..., R, 2, C]
    return pairs.reshape(*packed.shape[:-2], 2 * packed.shape[-2], packed.shape[-1]).to(
        torch.int8)
