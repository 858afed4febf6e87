"""npu_fused_infer_attention_score without a KV cache (BSH/BSND, no mask), from the 2.14.0
wheel's op docs: the case a vision tower's attention uses, every image a batch.

Key and value are (B, KV_S, H) / (B, KV_S, N, D), read up to actual_seq_lengths_kv each;
sparse_mode 0 without atten_mask computes no mask (pre_tokens and next_tokens ignored).
Limits modelled (the docs, Q_S > 1): N <= 256, D <= 512, N * D < 65535 in BSH/BSND, a D
whose bytes are not a multiple of 32 only up to 128; KV_N divides N, N / KV_N <= 64.
"""

from __future__ import annotations

from typing import Any

import torch

F32 = torch.float32
HALF_TYPES = (torch.float16, torch.bfloat16)
_UNMODELLED = ("pse_shift", "atten_mask", "query_padding_size", "kv_padding_size")


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


def dense_attention(a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows past a batch's actual query length come back NaN (content unspecified)."""
    q, k, v, layout = a["query"], a["key"], a["value"], a["input_layout"]
    for name in _UNMODELLED:
        if a[name] is not None:
            raise NotImplementedError(f"fused_infer_attention_score: dense {name} not modelled")
    if a["sparse_mode"] != 0:
        raise NotImplementedError("fused_infer_attention_score: dense KV with a sparse mask")
    if a["softmax_lse_flag"]:
        raise NotImplementedError("fused_infer_attention_score: dense KV softmax_lse")
    _require(q.dtype in HALF_TYPES, f"fused_infer_attention_score: query dtype {q.dtype}")
    _require(k.dtype == v.dtype == q.dtype, "fused_infer_attention_score: kv dtype != query")
    for name, t in (("query", q), ("key", k), ("value", v)):
        _require(t.is_contiguous(), f"fused_infer_attention_score: {name} must be contiguous")
    _require(k.shape == v.shape, "fused_infer_attention_score: key and value shapes differ")
    n_q = a["num_heads"]
    n_kv = a["num_key_value_heads"] or n_q
    _require(n_q % n_kv == 0 and n_q // n_kv <= 64, "fused_infer_attention_score: GQA ratio")
    if layout == "BSH":
        _require(q.dim() == 3 and k.dim() == 3, "BSH: query, key, value are (B, S, H)")
        _require(q.shape[2] % n_q == 0, "BSH: query's H is num_heads x D")
        d = q.shape[2] // n_q
        _require(k.shape[2] == n_kv * d, "BSH: key's H is num_key_value_heads x D")
        batch, q_s, kv_s = q.shape[0], q.shape[1], k.shape[1]
        qh, kh, vh = q.view(batch, q_s, n_q, d), k.view(batch, kv_s, n_kv, d), v.view(
            batch, kv_s, n_kv, d
        )
    else:
        _require(q.dim() == 4 and k.dim() == 4, "BSND: query, key, value are (B, S, N, D)")
        _require(q.shape[2] == n_q and k.shape[2] == n_kv, "BSND: N axes != the head counts")
        _require(q.shape[3] == k.shape[3], "BSND: query and key D differ")
        batch, q_s, kv_s, d = q.shape[0], q.shape[1], k.shape[1], q.shape[3]
        qh, kh, vh = q, k, v
    _require(k.shape[0] == batch, "fused_infer_attention_score: key batch != query batch")
    _require(n_q <= 256 and d <= 512, "fused_infer_attention_score: N <= 256 and D <= 512")
    _require(n_q * d < 65535, "fused_infer_attention_score: BSH/BSND need N * D < 65535")
    if (d * q.element_size()) % 32:
        _require(d <= 128, "fused_infer_attention_score: a D not 32-byte aligned is <= 128")
    q_lens = _lengths(a["actual_seq_lengths"], batch, q_s, "actual_seq_lengths")
    if q_s == 1:
        q_lens = [1] * batch  # the docs: the parameter has no effect at Q_S = 1
    kv_lens = _lengths(a["actual_seq_lengths_kv"], batch, kv_s, "actual_seq_lengths_kv")
    out = torch.full((batch, q_s, n_q, d), float("nan"), dtype=F32, device=q.device)
    group = n_q // n_kv
    for b in range(batch):
        q_len, kv_len = q_lens[b], kv_lens[b]
        if q_len == 0:
            continue
        _require(kv_len > 0, "fused_infer_attention_score: a query row with no key to see")
        keys = kh[b, :kv_len].to(F32).repeat_interleave(group, dim=1)
        values = vh[b, :kv_len].to(F32).repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", qh[b, :q_len].to(F32), keys) * a["scale"]
        out[b, :q_len] = torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), values)
    return out.to(q.dtype).reshape(q.shape), torch.zeros(1, dtype=F32, device=q.device)


def _lengths(values: Any, batch: int, limit: int, name: str) -> list[int]:
    """None: the shape's S for every batch; else length 1 (all) or at least B, each <= S."""
    if values is None:
        return [limit] * batch
    vals = [int(v) for v in values]
    _require(len(vals) == 1 or len(vals) >= batch, f"{name}: length 1 or at least B")
    vals = vals * batch if len(vals) == 1 else vals[:batch]
    _require(all(0 <= v <= limit for v in vals), f"{name}: each within 0 .. the shape's S")
    return vals
