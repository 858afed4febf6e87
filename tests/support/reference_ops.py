"""Naive, obviously-correct versions of the ops, used only as test oracles.

Loops over tokens, heads and sequences on purpose: every line is a formula from the
ops port's docstrings, in float64, so a fast implementation has something to match.
"""

from __future__ import annotations

import math

import torch

F64 = torch.float64


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xd = x.to(F64)
    rms = torch.sqrt((xd * xd).mean(dim=-1, keepdim=True) + eps)
    return xd / rms * weight.to(F64)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    summed = x.to(F64) + residual.to(F64)
    return rms_norm(summed, weight, eps), summed


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    gate = x[..., :d].to(F64)
    return gate / (1.0 + torch.exp(-gate)) * x[..., d:].to(F64)


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox_style: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        _rotate_loop(positions, query, cos_sin_cache, head_size, rotary_dim, is_neox_style),
        _rotate_loop(positions, key, cos_sin_cache, head_size, rotary_dim, is_neox_style),
    )


def _rotate_loop(
    positions: torch.Tensor,
    x: torch.Tensor,
    cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    neox: bool,
) -> torch.Tensor:
    half = rotary_dim // 2
    heads = x.reshape(x.shape[0], -1, head_size).to(F64)
    out = heads.clone()
    for t in range(heads.shape[0]):
        row = cache[int(positions[t])].to(F64)
        for h in range(heads.shape[1]):
            for j in range(half):
                # Pair j: (j, j + half) in neox style, (2j, 2j + 1) in GPT-J style.
                a, b = (j, j + half) if neox else (2 * j, 2 * j + 1)
                cos, sin = row[j], row[half + j]
                xa, xb = heads[t, h, a], heads[t, h, b]
                out[t, h, a] = xa * cos - xb * sin
                out[t, h, b] = xb * cos + xa * sin
    return out.reshape(x.shape)


def write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    block_size = key_cache.shape[1]
    for t, slot in enumerate(slot_mapping.tolist()):
        if slot < 0:
            continue
        key_cache[slot // block_size, slot % block_size] = key[t]
        value_cache[slot // block_size, slot % block_size] = value[t]


def paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    query_start_loc: list[int],
    seq_lens: list[int],
    block_table: list[list[int]],
    scale: float,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """[T, Hq, D] in float64; one softmax per (token, head), written out by hand.
    window: the token sees only its last `window` positions (itself included);
    sinks [Hq]: one more exp(sink) in each head's denominator."""
    block_size = key_cache.shape[1]
    num_q_heads = query.shape[1]
    group = num_q_heads // key_cache.shape[2]
    out = torch.zeros(query.shape, dtype=F64)
    for s, seq_len in enumerate(seq_lens):
        start, end = query_start_loc[s], query_start_loc[s + 1]
        q_len = end - start
        for i in range(q_len):
            visible = seq_len - q_len + i + 1
            lowest = 0 if window is None else max(0, visible - window)
            for h in range(num_q_heads):
                kv_head = h // group
                q = query[start + i, h].to(F64)
                scores = []
                values = []
                for pos in range(lowest, visible):
                    block = block_table[s][pos // block_size]
                    k = key_cache[block, pos % block_size, kv_head].to(F64)
                    scores.append(float(torch.dot(q, k)) * scale)
                    values.append(value_cache[block, pos % block_size, kv_head].to(F64))
                sink = None if sinks is None else float(sinks[h])
                top = max(scores) if sink is None else max(*scores, sink)
                weights = [math.exp(x - top) for x in scores]
                total = sum(weights) + (0.0 if sink is None else math.exp(sink - top))
                acc = torch.zeros(query.shape[2], dtype=F64)
                for w, v in zip(weights, values, strict=True):
                    acc += (w / total) * v
                out[start + i, h] = acc
    return out
