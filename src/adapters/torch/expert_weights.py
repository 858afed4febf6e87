"""What both devices' quantized grouped MLPs and int4 linears require of the int8 weights
vLLM loads, and the unpacking of ModelSlim's int4 pairs (W4A8_DYNAMIC)."""

from __future__ import annotations

import torch


def check_int8_experts(w13: torch.Tensor, w2: torch.Tensor) -> None:
    """A ValueError unless w13 and w2 are int8 [E, out, in] (vLLM's expert layout)."""
    for name, w in (("w13", w13), ("w2", w2)):
        if w.dtype != torch.int8 or w.dim() != 3:
            raise ValueError(f"quantized expert weight {name} must be int8 [E, out, in], "
                             f"not {w.dtype} {tuple(w.shape)}")


def check_int4_linear(values: torch.Tensor) -> None:
    """A ValueError unless an int4 linear's values are int8 [n, k], one value a byte."""
    if values.dtype != torch.int8 or values.dim() != 2:
        raise ValueError(f"int4 weight values must be int8 [n, k], not {values.dtype} "
                         f"{tuple(values.shape)}")


def check_int4_range(name: str, values: torch.Tensor) -> None:
    """A ValueError unless every int4 value held one a byte is in [-8, 7]."""
    if bool(((values < -8) | (values > 7)).any()):
        raise ValueError(f"int4 weight {name} holds values outside [-8, 7]")


def unpack_int4_pairs(packed: torch.Tensor) -> torch.Tensor:
    """int8 [..., R, C] holding two int4 per byte along R (even row in the low nibble) ->
    the signed values as int8 [..., 2R, C]."""
    v = packed.to(torch.int16)
    low = ((v & 0xF) ^ 8) - 8
    high = v >> 4  # arithmetic: the high nibble with its sign
    pairs = torch.stack((low, high), dim=-2)  # [..., R, 2, C]
    return pairs.reshape(*packed.shape[:-2], 2 * packed.shape[-2], packed.shape[-1]).to(
        torch.int8)
