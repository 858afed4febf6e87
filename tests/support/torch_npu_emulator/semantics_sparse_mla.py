"""npu_lightning_indexer and npu_sparse_flash_attention, written from the 2.14.0 wheel's
op docs (torch_npu/_op_plugin_docs.py). Independent of adapters.cpu.sparse_mla.

Modelled: TND queries (running-sum query lengths), PA_BSND paged keys with one key head,
sparse_mode 0 (all of each batch's keys) and 3 (rightDownCausal: query i of a batch of
q_len queries over kv_len keys sees keys 0 .. kv_len - q_len + i), sparse_block_size 1.
Documented limits raise ValueError; what the docs allow but is not modelled raises
NotImplementedError.
"""

from __future__ import annotations

from typing import Any

import torch

from support.torch_npu_emulator.semantics import F32, HALF_TYPES, _require

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


def npu_sparse_flash_attention(a: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    q, k, v, idx = a["query"], a["key"], a["value"], a["sparse_indices"]
    q_rope, k_rope = a["query_rope"], a["key_rope"]
    _require(v is not None, "value is required")
    _common(a, "layout_kv", ("query", "key", "value"))
    _require((q_rope is None) == (k_rope is None), "query_rope and key_rope go together")
    if q_rope is None:
        raise NotImplementedError("sparse attention without rope inputs is not modelled")
    _require(q_rope.is_contiguous() and k_rope.is_contiguous(), "rope inputs contiguous")
    _require(q.dtype == k.dtype == v.dtype == q_rope.dtype == k_rope.dtype,
             "query, key, value and rope inputs share a dtype")
    _require(q.dim() == 3 and k.dim() == 4 and v.shape == k.shape,
             "TND query (T, N, D); PA_BSND key = value (blocks, bs, KV_N, D)")
    _require(k.shape[3] == q.shape[2], "query and key D equal")
    if k.shape[2] != 1:
        raise NotImplementedError("more than one key head is not modelled")
    tokens, heads, _ = q.shape
    _require(tuple(q_rope.shape[:2]) == (tokens, heads), "query_rope (T, N, rope D)")
    _require(tuple(k_rope.shape[:3]) == tuple(k.shape[:3]), "key_rope (blocks, bs, KV_N, rope D)")
    _require(idx.dtype == torch.int32 and idx.dim() == 3 and idx.shape[:2] == (tokens, 1),
             "TND: sparse_indices int32 (T, KV_N, sparse_size)")
    _require(idx.is_contiguous(), "sparse_indices must be contiguous")
    valid = idx[:, 0] >= 0
    _require(bool((valid[:, 1:] <= valid[:, :-1]).all()),
             "sparse_indices: valid entries first, invalid (-1) after")
    if a["sparse_block_size"] != 1:
        raise NotImplementedError("sparse_block_size above 1 is not modelled")
    if a["attention_mode"] != 0 or a["return_softmax_lse"] or a["sinks"] is not None:
        raise NotImplementedError("attention_mode, softmax lse and sinks are not modelled")
    if a["pre_tokens"] != 2**63 - 1 or a["next_tokens"] != 2**63 - 1:
        raise NotImplementedError("pre_tokens / next_tokens are not modelled")
    batch_of, visible, lens = _batches(a, "actual_seq_lengths_query", "actual_seq_lengths_kv",
                                       tokens)
    _require(a["block_table"].shape[0] == len(lens), "block_table: one row per batch")
    # softmax(scale * (q . k + q_rope . k_rope)) @ v over the selected keys the mask
    # leaves, in float32 (one dot product over D + rope D), rounded once.
    picked = idx[:, 0].long()
    seen = valid & (picked < torch.tensor(visible)[:, None])
    at = torch.where(seen, picked, 0)
    table, latent = a["block_table"], q.shape[2]
    rows = torch.cat((_paged(k, table, batch_of, 0, at), _paged(k_rope, table, batch_of, 0, at)),
                     dim=-1).to(F32)
    values = _paged(v, table, batch_of, 0, at).to(F32)
    query = torch.cat((q, q_rope), dim=-1).to(F32)
    scores = torch.bmm(query, rows.transpose(1, 2)) * a["scale_value"]
    scores = scores.masked_fill(~seen[:, None, :], float("-inf"))
    out = torch.bmm(scores.softmax(dim=-1), values[..., :latent]).to(q.dtype)
    # softmax_max and softmax_sum: not modelled (return_softmax_lse is refused above).
    return out, torch.zeros(1, dtype=F32), torch.zeros(1, dtype=F32)


IMPLEMENTED = {
    "npu_lightning_indexer": npu_lightning_indexer,
    "npu_sparse_flash_attention": npu_sparse_flash_attention,
}
