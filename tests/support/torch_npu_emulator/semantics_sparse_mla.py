"""npu_lightning_indexer, npu_sparse_flash_attention and npu_attention_update, written from
the 2.14.0 wheel's op docs (torch_npu/_op_plugin_docs.py) and meta kernels, and
ops-transformer's SparseFlashAttention / AttentionUpdate docs (the CANN ops torch_npu
binds) where the wheel is silent. Independent of adapters.cpu.sparse_mla.

Modelled: TND queries (running-sum query lengths) with PA_BSND paged keys or TND keys
(running-sum key lengths), one key head, sparse_mode 0 (all of each batch's keys) and 3
(rightDownCausal: query i of a batch of q_len queries over kv_len keys sees keys
0 .. kv_len - q_len + i), sparse_block_size 1, attention_mode 2 (MLA-absorb, the only one
the docs allow); `sinks` (float32 (N1), a logit per head in the softmax's denominator) on
Ascend 950 only; return_softmax_lse (softmax_max and softmax_sum, float32 (KV_N, T, N1),
lse = max + log(sum)), refused with PA_BSND keys on A2/A3. The chip is the emulator's SoC
name (`_soc`). Documented limits raise ValueError; what the docs allow but is not modelled
raises NotImplementedError. Not checked: D = 512 and rope D = 64 (the docs' only values;
the tiny test models are smaller).
"""
from __future__ import annotations

import itertools
from typing import Any

import torch

from support.torch_npu_emulator.semantics import F32, HALF_TYPES, _require

DEFAULT_SOC = "Ascend910B1"  # the emulator's default chip (A2)
SPARSE_COUNTS = (*range(1, 2049), 3072, 4096, 5120, 6144, 7168, 8192)


def _batches(a: dict[str, Any], q_key: str, kv_key: str, tokens: int) -> tuple[list[int], ...]:
    """(batch of each query token, its last visible key + 1, its batch's kv length)."""
    q_ends, kv_lens = a[q_key], a[kv_key]
    _require(q_ends is not None and kv_lens is not None, "TND: both length tensors are required")
    _require(q_ends.dtype == torch.int32 and kv_lens.dtype == torch.int32,
             "actual_seq_lengths: int32")
    ends, lens = [int(x) for x in q_ends], [int(x) for x in kv_lens]
    _require(len(ends) == len(lens), "one length per batch in both tensors")
    _require(ends == sorted(ends) and all(e >= 0 for e in ends), "TND: running sums")
    _require(ends[-1] == tokens, "TND: the running sums cover T")
    batch_of, visible = [], []
    start = 0
    for b, (end, kv_len) in enumerate(zip(ends, lens, strict=True)):
        _require(kv_len >= 0, "actual_seq_lengths_kv >= 0")
        q_len = end - start
        for i in range(q_len):
            batch_of.append(b)
            visible.append(kv_len - q_len + i + 1 if a["sparse_mode"] == 3 else kv_len)
        start = end
    return batch_of, visible, lens


def _paged(cache: torch.Tensor, table: torch.Tensor, batch_of: list[int], width: int,
           positions: torch.Tensor) -> torch.Tensor:
    """Rows [T, K, D] of a PA_BSND cache [blocks, bs, 1, D] at positions [T, K] (>= 0)."""
    block_size = cache.shape[1]
    rows = table.long()[torch.tensor(batch_of)]  # [T, max_blocks]
    blocks = torch.gather(rows, 1, torch.div(positions, block_size, rounding_mode="floor"))
    return cache[:, :, 0][blocks, positions % block_size]


def _common(a: dict[str, Any], layout_key: str, key_names: tuple[str, ...]) -> None:
    _require(a["layout_query"] in ("BSND", "TND"), "layout_query BSND or TND")
    _require(a[layout_key] in ("PA_BSND", "BSND", "TND"), f"{layout_key} PA_BSND, BSND or TND")
    if a["layout_query"] != "TND" or a[layout_key] != "PA_BSND":
        raise NotImplementedError("only the TND query with PA_BSND keys is modelled")
    _require(a["sparse_mode"] in (0, 3), "sparse_mode 0 or 3")
    table = a["block_table"]
    _require(table is not None and table.dtype == torch.int32 and table.dim() == 2,
             "PA_BSND: block_table int32, two-dimensional")
    for name in key_names:
        t = a[name]
        _require(t.is_contiguous(), f"{name} must be contiguous")
        _require(t.dtype in HALF_TYPES, f"{name}: float16 or bfloat16")


def npu_lightning_indexer(a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    q, k, w = a["query"], a["key"], a["weights"]
    _common(a, "layout_key", ("query", "key", "weights"))
    _require(q.dtype == k.dtype == w.dtype, "query, key and weights share a dtype")
    _require(q.dim() == 3 and k.dim() == 4, "TND query (T, N1, D); PA_BSND key (blocks, bs, N2, D)")
    _require(w.dim() == 2 and tuple(w.shape) == tuple(q.shape[:2]), "weights (T, N1)")
    _require(k.shape[3] == q.shape[2], "query and key D equal")
    if k.shape[2] != 1:
        raise NotImplementedError("the indexer with more than one key head is not modelled")
    count = a["sparse_count"]
    _require(count in SPARSE_COUNTS, "sparse_count 1-2048, 3072, 4096, 5120, 6144, 7168 or 8192")
    if a["pre_tokens"] != 2**63 - 1 or a["next_tokens"] != 2**63 - 1:
        raise NotImplementedError("pre_tokens / next_tokens are not modelled")
    tokens = q.shape[0]
    batch_of, visible, lens = _batches(
        a, "actual_seq_lengths_query", "actual_seq_lengths_key", tokens
    )
    _require(a["block_table"].shape[0] == len(lens), "block_table: one row per batch")
    # score(t, p) = sum_h weights[t, h] * relu(q[t, h] . k[p]), in float32, over the
    # keys the mask leaves; the top sparse_count positions, best first, -1 after.
    width = max(max(visible), 1)
    pos = torch.arange(width).expand(tokens, width)
    seen = pos < torch.tensor(visible)[:, None]
    keys = _paged(k, a["block_table"], batch_of, width, torch.where(seen, pos, 0))
    scores = torch.einsum("thd,tsd->ths", q.to(F32), keys.to(F32)).relu()
    index = torch.einsum("th,ths->ts", w.to(F32), scores).masked_fill(~seen, float("-inf"))
    kept = min(count, width)
    values, picked = index.topk(kept, dim=-1)
    picked = torch.where(values == float("-inf"), -1, picked)
    out = torch.full((tokens, 1, count), -1, dtype=torch.int32)
    out[:, 0, :kept] = picked.to(torch.int32)
    shown = torch.full((tokens, 1, count), float("-inf"), dtype=F32)
    shown[:, 0, :kept] = values
    return out, (shown.to(q.dtype) if a["return_value"] else torch.empty(0, dtype=q.dtype))


def _is_a5(soc: str) -> bool:
    """Ascend 950PR/950DT (torch_npu also names them Ascend910_95*): the chips whose
    sparse_flash_attention takes sinks and returns the LSE with PA_BSND keys."""
    name = soc.lower()
    return "ascend950" in name or name.startswith("ascend910_95")


def _kv_rows(a: dict[str, Any], batch_of: list[int], at: torch.Tensor,
             name: str) -> torch.Tensor:
    """Rows [T, K, D] of key-like input `name` at positions [T, K] of each query's batch."""
    t = a[name]
    if a["layout_kv"] == "PA_BSND":
        return _paged(t, a["block_table"], batch_of, 0, at)
    starts = torch.tensor([0, *[int(x) for x in a["actual_seq_lengths_kv"]]])[:-1]
    return t[:, 0][starts[torch.tensor(batch_of)][:, None] + at]


def npu_sparse_flash_attention(a: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    q, k, v, idx = a["query"], a["key"], a["value"], a["sparse_indices"]
    q_rope, k_rope, sinks = a["query_rope"], a["key_rope"], a["sinks"]
    soc = a.get("_soc", DEFAULT_SOC)
    _require(v is not None, "value is required")
    _require(a["layout_query"] in ("BSND", "TND"), "layout_query BSND or TND")
    _require(a["layout_kv"] in ("PA_BSND", "BSND", "TND"), "layout_kv PA_BSND, BSND or TND")
    paged = a["layout_kv"] == "PA_BSND"
    _require(paged or a["layout_kv"] == a["layout_query"],
             "layout_kv BSND or TND: layout_query must be the same")
    if a["layout_query"] != "TND":
        raise NotImplementedError("only the TND query (with PA_BSND or TND keys) is modelled")
    _require(a["sparse_mode"] in (0, 3), "sparse_mode 0 or 3")
    # ops-transformer's SparseFlashAttention docs: attention_mode takes only 2 (MLA-absorb).
    _require(a["attention_mode"] == 2, "attention_mode 2 (MLA-absorb) only")
    for name in ("query", "key", "value"):
        _require(a[name].is_contiguous(), f"{name} must be contiguous")
        _require(a[name].dtype in HALF_TYPES, f"{name}: float16 or bfloat16")
    table = a["block_table"]
    if paged:
        _require(table is not None and table.dtype == torch.int32 and table.dim() == 2,
                 "PA_BSND: block_table int32, two-dimensional")
        _require(k.dim() == 4, "PA_BSND key (blocks, bs, KV_N, D)")
    else:
        if table is not None:
            raise NotImplementedError("a block_table with TND keys is not modelled")
        _require(k.dim() == 3, "TND key (T2, KV_N, D)")
    _require((q_rope is None) == (k_rope is None), "query_rope and key_rope go together")
    if q_rope is None:
        raise NotImplementedError("sparse attention without rope inputs is not modelled")
    _require(q_rope.is_contiguous() and k_rope.is_contiguous(), "rope inputs contiguous")
    _require(q.dtype == k.dtype == v.dtype == q_rope.dtype == k_rope.dtype,
             "query, key, value and rope inputs share a dtype")
    _require(q.dim() == 3 and v.shape == k.shape, "TND query (T, N, D); value shaped as key")
    _require(k.shape[-1] == q.shape[2], "query and key D equal")
    kv_heads = k.shape[-2]
    _require(kv_heads == 1, "KV_N 1 only")
    tokens, heads, _ = q.shape
    if not _is_a5(soc):
        _require(heads in (1, 2, 4, 8, 16, 32, 64, 128),
                 f"N1 {heads}: 1, 2, 4, .., 128 on A2/A3 ({soc})")
    _require(tuple(q_rope.shape[:2]) == (tokens, heads), "query_rope (T, N, rope D)")
    _require(tuple(k_rope.shape[:-1]) == tuple(k.shape[:-1]), "key_rope shaped as key but D")
    _require(idx.dtype == torch.int32 and idx.dim() == 3 and idx.shape[:2] == (tokens, 1),
             "TND: sparse_indices int32 (T, KV_N, sparse_size)")
    _require(idx.is_contiguous(), "sparse_indices must be contiguous")
    valid = idx[:, 0] >= 0
    _require(bool((valid[:, 1:] <= valid[:, :-1]).all()),
             "sparse_indices: valid entries first, invalid (-1) after")
    if a["sparse_block_size"] != 1:
        raise NotImplementedError("sparse_block_size above 1 is not modelled")
    lse = a["return_softmax_lse"]
    if sinks is not None:
        _require(_is_a5(soc), f"sinks: Ascend 950PR/950DT only, not A2/A3 ({soc})")
        _require(sinks.dtype == F32 and tuple(sinks.shape) == (heads,),
                 "sinks: float32, shape (N1)")
        if lse:
            raise NotImplementedError("the softmax LSE together with sinks is not modelled")
    if lse and paged:
        _require(_is_a5(soc), f"return_softmax_lse with layout_kv PA_BSND: not on A2/A3 ({soc})")
    if a["pre_tokens"] != 2**63 - 1 or a["next_tokens"] != 2**63 - 1:
        raise NotImplementedError("pre_tokens / next_tokens are not modelled")
    lengths = a
    if not paged:
        ends = a["actual_seq_lengths_kv"]
        _require(ends is not None and ends.dtype == torch.int32, "TND: actual_seq_lengths_kv int32")
        bounds = [0, *[int(x) for x in ends]]
        _require(bounds == sorted(bounds) and bounds[-1] <= k.shape[0],
                 "TND: actual_seq_lengths_kv running sums within T2")
        diffs = torch.tensor([b - a_ for a_, b in itertools.pairwise(bounds)],
                             dtype=torch.int32)
        lengths = {**a, "actual_seq_lengths_kv": diffs}
    batch_of, visible, lens = _batches(lengths, "actual_seq_lengths_query",
                                       "actual_seq_lengths_kv", tokens)
    if paged:
        _require(table.shape[0] == len(lens), "block_table: one row per batch")
    # softmax(scale * (q . k + q_rope . k_rope)) @ v over the selected keys the mask
    # leaves, in float32 (one dot product over D + rope D), rounded once; a sink per head
    # joins the softmax's denominator (one more logit, no value).
    picked = idx[:, 0].long()
    seen = valid & (picked < torch.tensor(visible)[:, None])
    at = torch.where(seen, picked, 0)
    rows = torch.cat((_kv_rows(a, batch_of, at, "key"), _kv_rows(a, batch_of, at, "key_rope")),
                     dim=-1).to(F32)
    values = _kv_rows(a, batch_of, at, "value").to(F32)
    query = torch.cat((q, q_rope), dim=-1).to(F32)
    scores = torch.bmm(query, rows.transpose(1, 2)) * a["scale_value"]
    scores = scores.masked_fill(~seen[:, None, :], float("-inf"))
    if sinks is not None:
        sink = sinks.to(F32).view(1, heads, 1).expand(tokens, heads, 1)
        probs = torch.cat((scores, sink), dim=-1).softmax(dim=-1)[..., :-1]
    else:
        probs = scores.softmax(dim=-1)
    out = torch.bmm(probs, values[..., : q.shape[2]]).to(q.dtype)
    if not lse:
        return out, torch.empty(0, dtype=F32), torch.empty(0, dtype=F32)
    # softmax_max: the max of the scaled scores; softmax_sum: sum(exp(score - max)); both
    # (KV_N, T, N1 / KV_N) float32, so lse = max + log(sum), a natural log.
    top = scores.max(dim=-1).values
    total = torch.exp(scores - top[..., None]).sum(dim=-1)
    return out, top.unsqueeze(0), total.unsqueeze(0)


def npu_attention_update(a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """ops-transformer's AttentionUpdate: O = sum_i O_i exp(lse_i - lse_m), lse_m the
    log-sum-exp of the lse_i; lse_out valid for update_type 1."""
    lse, outs, kind = a["lse"], a["local_out"], a["update_type"]
    _require(1 <= len(lse) == len(outs) <= 16, "one lse per local_out; sp in [1, 16]")
    _require(kind in (0, 1), "update_type 0 or 1")
    first = outs[0]
    _require(first.dim() == 2, "local_out (batch * seqLen * headNum, head_dim)")
    rows, dim = first.shape
    _require(8 <= dim <= 512 and dim % 8 == 0, "head_dim in [8, 512], a multiple of 8")
    for part, out in zip(lse, outs, strict=True):
        _require(part.dtype == F32, "lse: float32")
        _require(out.dtype in (F32, *HALF_TYPES) and out.dtype == first.dtype,
                 "local_out: float32, float16 or bfloat16, one dtype")
        _require(tuple(part.shape) == (rows,) and tuple(out.shape) == (rows, dim),
                 "lse (N,) and local_out (N, head_dim) alike")
        _require(part.is_contiguous() and out.is_contiguous(), "contiguous tensors only")
    stacked = torch.stack([x.to(F32) for x in lse])
    top = stacked.max(dim=0).values
    merged = top + torch.log(torch.exp(stacked - top).sum(dim=0))
    weights = torch.exp(stacked - merged)
    out = (torch.stack([o.to(F32) for o in outs]) * weights[..., None]).sum(dim=0)
    return out.to(first.dtype), (merged if kind == 1 else torch.zeros_like(merged))


IMPLEMENTED = {
    "npu_lightning_indexer": npu_lightning_indexer,
    "npu_sparse_flash_attention": npu_sparse_flash_attention,
    "npu_attention_update": npu_attention_update,
}

# Ops whose refusals depend on the chip: the emulator passes its SoC name as "_soc".
CHIP_AWARE = frozenset({"npu_sparse_flash_attention"})
