"""Naive MoE and MLA oracles in float64, loops over tokens, heads and positions on purpose.

Each line is a sentence of the ports' docstrings (ports/moe.py, ports/mla.py), so a
vectorised implementation has something obviously right to match.
"""

from __future__ import annotations

import math

import torch

F64 = torch.float64


def route(
    logits: torch.Tensor,
    top_k: int,
    softmax: bool,
    renormalize: bool,
    groups: int | None = None,
    topk_group: int | None = None,
    scale: float = 1.0,
    bias: torch.Tensor | None = None,
) -> list[dict[int, float]]:
    """Per token: {expert id: weight}."""
    result = []
    for row in logits.to(F64):
        scores = torch.softmax(row, 0) if softmax else torch.sigmoid(row)
        choice = [
            float(s) + (float(bias[e]) if bias is not None else 0.0) for e, s in enumerate(scores)
        ]
        candidates = list(range(len(choice)))
        if groups and topk_group:
            size = len(choice) // groups
            group_score = []
            for g in range(groups):
                members = sorted((choice[e] for e in range(g * size, (g + 1) * size)), reverse=True)
                group_score.append(members[0] + members[1] if bias is not None else members[0])
            kept = sorted(range(groups), key=lambda g: -group_score[g])[:topk_group]
            candidates = [e for e in candidates if e // size in kept]
        chosen = sorted(candidates, key=lambda e: -choice[e])[:top_k]
        weights = {e: float(scores[e]) for e in chosen}
        if renormalize:
            total = sum(weights.values())
            weights = {e: w / total for e, w in weights.items()}
        result.append({e: w * scale for e, w in weights.items()})
    return result


def routes_of(weights: torch.Tensor, ids: torch.Tensor) -> list[dict[int, float]]:
    """An ops port's (weights, ids) as the oracle's per-token {expert: weight}."""
    return [
        dict(zip(i.tolist(), w.tolist(), strict=True)) for w, i in zip(weights, ids, strict=True)
    ]


def moe(
    hidden: torch.Tensor,
    routes: list[dict[int, float]],
    w13: torch.Tensor,
    w2: torch.Tensor,
    local: dict[int, int] | None = None,
) -> torch.Tensor:
    """Each token: sum over its experts held here of weight * down(silu(gate) * up)."""
    inter = w2.shape[2]
    out = torch.zeros(hidden.shape, dtype=F64)
    for t, chosen in enumerate(routes):
        x = hidden[t].to(F64)
        for expert, weight in chosen.items():
            e = expert if local is None else local.get(expert)
            if e is None:
                continue
            gate = w13[e, :inter].to(F64) @ x
            up = w13[e, inter:].to(F64) @ x
            act = gate / (1.0 + torch.exp(-gate)) * up
            out[t] += weight * (w2[e].to(F64) @ act)
    return out


def _softmax_weighted(scores: list[float], values: list[torch.Tensor]) -> torch.Tensor:
    top = max(scores)
    weights = [math.exp(s - top) for s in scores]
    total = sum(weights)
    acc = torch.zeros(values[0].shape, dtype=F64)
    for w, v in zip(weights, values, strict=True):
        acc += (w / total) * v
    return acc


def prefill_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    query_lens: list[int],
    kv_lens: list[int],
    scale: float,
) -> torch.Tensor:
    out = torch.zeros(query.shape[0], query.shape[1], value.shape[2], dtype=F64)
    q_start = k_start = 0
    for q_len, kv_len in zip(query_lens, kv_lens, strict=True):
        for i in range(q_len):
            visible = kv_len - q_len + i + 1
            for h in range(query.shape[1]):
                q = query[q_start + i, h].to(F64)
                scores = [float(q @ key[k_start + j, h].to(F64)) * scale for j in range(visible)]
                values = [value[k_start + j, h].to(F64) for j in range(visible)]
                out[q_start + i, h] = _softmax_weighted(scores, values)
        q_start += q_len
        k_start += kv_len
    return out


def latent_decode(
    query_latent: torch.Tensor,
    query_rope: torch.Tensor,
    cache: torch.Tensor,
    block_table: list[list[int]],
    seq_lens: list[int],
    scale: float,
) -> torch.Tensor:
    latent_dim = query_latent.shape[-1]
    block_size = cache.shape[1]
    out = torch.zeros(query_latent.shape, dtype=F64)
    for b, seq_len in enumerate(seq_lens):
        rows = [
            cache[block_table[b][p // block_size], p % block_size].to(F64) for p in range(seq_len)
        ]
        for h in range(query_latent.shape[1]):
            q = torch.cat((query_latent[b, h], query_rope[b, h])).to(F64)
            scores = [float(q @ r) * scale for r in rows]
            out[b, h] = _softmax_weighted(scores, [r[:latent_dim] for r in rows])
    return out
