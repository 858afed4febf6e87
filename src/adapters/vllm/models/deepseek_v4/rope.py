"""DeepSeek-V4's rotary embedding: interleaved pairs on the trailing slice of each head.

Two bases (config.rope_parameters "main" for sliding-only layers, "compress" for the
compressed layers, their compressors and the indexer), one frequency per channel pair of the
rope slice (head_dim x partial_rotary_factor channels, the same width for the indexer's
narrower heads). The attention output's rope slice is rotated back by the query's position
(`sign=-1`), since V4 reads its K = V rows as values too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def inv_freq(config: Any, kind: str) -> torch.Tensor:
    """1 / base^(2i/d) for the rope kind ("main" or "compress"); only the default rope type
    (no YaRN scaling) is implemented."""
    params: Mapping[str, Any] = config.rope_parameters[kind]
    if params.get("rope_type", "default") != "default":
        raise ValueError(
            f"DeepSeek-V4 rope {kind!r} has rope_type {params['rope_type']!r}: the plugin's "
            "DeepSeek-V4 class implements only the default rope; serve a checkpoint "
            "without rope scaling"
        )
    dim = int(config.head_dim * params.get("partial_rotary_factor", 1.0))
    base = float(params["rope_theta"])
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))


def rotate(x: torch.Tensor, positions: torch.Tensor, freqs: torch.Tensor,
           sign: float = 1.0) -> torch.Tensor:
    """x [T, ..., D] with positions [T]: the last 2 * len(freqs) channels rotated pairwise
    (channels 2i, 2i+1 by angle sign * position * freqs[i]), the leading ones kept."""
    angles = positions.to(torch.float32)[:, None] * freqs.to(x.device)[None, :]
    cos = angles.cos().repeat_interleave(2, dim=-1)
    sin = (sign * angles.sin()).repeat_interleave(2, dim=-1)
    for _ in range(x.dim() - 2):
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    width = cos.shape[-1]
    nope, rope = x[..., :-width], x[..., -width:]
    pairs = rope.float()
    swapped = torch.stack((-pairs[..., 1::2], pairs[..., 0::2]), dim=-1).flatten(-2)
    rotated = (pairs * cos + swapped * sin).to(x.dtype)
    return torch.cat([nope, rotated], dim=-1)
