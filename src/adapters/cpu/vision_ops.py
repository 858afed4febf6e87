"""The host's M-RoPE and encoder attention in plain torch: the reference for the NPU's."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from adapters.torch.mrope import mrope_cos_sin

_F32 = torch.float32


def mrope_tables(
    positions: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    mrope_section: tuple[int, int, int],
    interleaved: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) as [T, 1, rotary_dim / 2] float32, ready for the rotation of each head."""
    cos, sin = mrope_cos_sin(cos_sin_cache, positions, mrope_section, interleaved)
    return cos.to(_F32).unsqueeze(1), sin.to(_F32).unsqueeze(1)


def encoder_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    seq_lens: tuple[int, ...],
    scale: float,
) -> torch.Tensor:
    """SDPA per sequence (no mask inside one), as vLLM's torch ViT path computes it; half
    types in float32 with one rounding at the output, the NPU attention's contract."""
    if sum(seq_lens) != query.shape[0]:
        raise ValueError(
            f"encoder_attention: the sequence lengths sum to {sum(seq_lens)}, the query has "
            f"{query.shape[0]} tokens; pass one length per image (or window), in order."
        )
    group = query.shape[1] // key.shape[1]
    out = torch.empty_like(query)
    start = 0
    for n in seq_lens:
        if n == 0:
            continue
        rows = slice(start, start + n)
        q, k, v = (t[rows].to(_F32).transpose(0, 1) for t in (query, key, value))
        if group > 1:
            k, v = k.repeat_interleave(group, dim=0), v.repeat_interleave(group, dim=0)
        out[rows] = F.scaled_dot_product_attention(q, k, v, scale=scale).transpose(0, 1)
        start += n
    return out
