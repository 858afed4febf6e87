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

DeepSeek-V4's checkpoints scale the "compress" rope with YaRN (the paper's NTK-by-parts
interpolation, arXiv 2309.00071): channel pairs that turn many times within the original
context keep their frequency, those that turn less than once are divided by `factor`, with
a linear ramp between (the correction range from beta_fast and beta_slow, floored and
ceiled unless the kind's `truncate` is false, read per kind as vLLM's get_rope reads it).
Its `attention_factor` multiplies cos and sin; transformers' V4 config sets it to 1.0 where
a checkpoint leaves it out (V4 does not scale by YaRN's mscale); one given is applied.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from ports.ops import Ops


def rope_table(config: Any, kind: str) -> tuple[torch.Tensor, float]:
    """The rope kind's frequency per channel pair and the factor on its cos and sin: the
    default rope (1 / base^(2i/d), factor 1) or YaRN; any other rope type is refused."""
    params: Mapping[str, Any] = config.rope_parameters[kind]
    rope_type = params.get("rope_type", params.get("type", "default"))
    dim = int(config.head_dim * params.get("partial_rotary_factor", 1.0))
    base = float(params["rope_theta"])
    plain = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    if rope_type == "default":
        return plain, 1.0
    if rope_type == "yarn":
        return _yarn(config, params, dim, base, plain)
    raise ValueError(
        f"DeepSeek-V4 rope {kind!r} has rope_type {rope_type!r}: the plugin's DeepSeek-V4 "
        "class implements the default rope and YaRN; serve a checkpoint with one of those"
    )


def _yarn(config: Any, params: Mapping[str, Any], dim: int, base: float,
          plain: torch.Tensor) -> tuple[torch.Tensor, float]:
    original = float(params["original_max_position_embeddings"])
    factor = params.get("factor")
    factor = float(factor) if factor else float(config.max_position_embeddings) / original
    fast = float(params.get("beta_fast") or 32)
    slow = float(params.get("beta_slow") or 1)

    def pair_turning(rotations: float) -> float:
        # The channel pair that turns `rotations` times over the original context.
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_turning(fast), pair_turning(slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    freqs = plain * (1 - ramp) + (plain / factor) * ramp
    scale = params.get("attention_factor")
    if scale is None:
        mscale, mscale_all = params.get("mscale"), params.get("mscale_all_dim")
        scale = (_mscale(factor, mscale) / _mscale(factor, mscale_all)
                 if mscale and mscale_all else _mscale(factor, 1.0))
    return freqs, float(scale)


def _mscale(factor: float, weight: float) -> float:
    return 1.0 if factor <= 1 else 0.1 * weight * math.log(factor) + 1.0


def rotate(ops: Ops, x: torch.Tensor, positions: torch.Tensor, freqs: torch.Tensor,
           sign: float = 1.0, scale: float = 1.0) -> torch.Tensor:
    """x [T, H, D] with positions [T]: the last 2 * len(freqs) channels of each head rotated
    pairwise (channels 2i, 2i+1 by angle sign * position * freqs[i], cos and sin times
    `scale`), the leading ones kept."""
    tokens, heads = x.shape[0], x.shape[1]
    width = 2 * freqs.shape[0]
    angles = positions.to(torch.float32)[:, None] * freqs.to(x.device)[None, :]
    cos_sin = torch.cat((angles.cos(), sign * angles.sin()), dim=-1)  # [T, width]
    if scale != 1.0:
        cos_sin = cos_sin * scale
    rope = x[..., -width:].float().reshape(tokens, heads * width)
    rows = torch.arange(tokens, device=x.device)
    # The port rotates a query and a key together; V4 rotates one tensor a call, so the
    # key is an empty one (no head).
    rotated, _ = ops.rotary_embedding(rows, rope, rope[:, :0], cos_sin, width, width, False)
    rotated = rotated.view(tokens, heads, width).to(x.dtype)
    return torch.cat((x[..., :-width], rotated), dim=-1)
