"""DeepSeek-V4's rotary embedding: interleaved pairs on the trailing slice of each head.

Two bases (config.rope_parameters "main" for sliding-only layers, "compress" for the
compressed layers, their compressors and the indexer), one frequency per channel pair of the
rope slice (head_dim x partial_rotary_factor channels, the same width for the indexer's
narrower heads). The attention output's rope slice is rotated back by the query's position
(`sign=-1`), since V4 reads its K = V rows as values too.

The rotation goes through the device's ops port (Ops.rotary_embedding, GPT-J style: pairs
2i, 2i+1 by frequency i): each head's rope slice is passed as a head of its own, with the
cos | sin rows of this call's positions as the cache. In float32, rounded once to x's dtype,
as V4 computes its rope (a bf16 call would round cos and sin to bf16 on the NPU first).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ports.ops import Ops


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


def rotate(ops: Ops, x: torch.Tensor, positions: torch.Tensor, freqs: torch.Tensor,
           sign: float = 1.0) -> torch.Tensor:
    """x [T, H, D] with positions [T]: the last 2 * len(freqs) channels of each head rotated
    pairwise (channels 2i, 2i+1 by angle sign * position * freqs[i]), the leading ones kept."""
    tokens, heads = x.shape[0], x.shape[1]
    width = 2 * freqs.shape[0]
    angles = positions.to(torch.float32)[:, None] * freqs.to(x.device)[None, :]
    cos_sin = torch.cat((angles.cos(), sign * angles.sin()), dim=-1)  # [T, width]
    rope = x[..., -width:].float().reshape(tokens, heads * width)
    rows = torch.arange(tokens, device=x.device)
    # The port rotates a query and a key together; V4 rotates one tensor a call, so the
    # key is an empty one (no head).
    rotated, _ = ops.rotary_embedding(rows, rope, rope[:, :0], cos_sin, width, width, False)
    rotated = rotated.view(tokens, heads, width).to(x.dtype)
    return torch.cat((x[..., :-width], rotated), dim=-1)
