"""npu_fused_infer_attention_score's MLA cases, written from the 2.14.0 wheel's op docs.

Two cases beyond the paged MHA/GQA one in semantics.py: TND prefill (no page attention,
running-sum lengths, Q/K D 192, V D 128/192, bf16) and the absorbed MLA decode (BSND,
query_rope/key_rope, paged, latent D 512, rope D 64, 32/64/128 query heads, one KV head,
block size 16/128). Independent of adapters.cpu.mla. Documented limits raise ValueError.
"""

from __future__ import annotations

from typing import Any

import torch

from support.torch_npu_emulator import semantics
from support.torch_npu_emulator.semantics import (
    F32,
    HALF_TYPES,
    UNMODELLED_ATTENTION_INPUTS,
    _require,
)


def npu_fused_infer_attention_score(a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    if a["query_rope"] is not None or a["key_rope"] is not None:
        return _mla_decode(a)
    if a["input_layout"] == "TND":
        return _tnd_prefill(a)
    return semantics.npu_fused_infer_attention_score(a)


def _common(a: dict[str, Any]) -> None:
    for name in UNMODELLED_ATTENTION_INPUTS:
        if a[name] is not None:
            raise NotImplementedError(f"fused_infer_attention_score: {name} is not modelled")
    for name in ("query", "key", "value"):
        _require(a[name].is_contiguous(), f"fused_infer_attention_score: {name} not contiguous")


def _tnd_prefill(a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    _common(a)
    q, k, v = a["query"], a["key"], a["value"]
    _require(a["block_table"] is None, "TND: page attention is not supported")
    _require(q.dim() == k.dim() == v.dim() == 3, "TND: query, key, value are (T, N, D)")
    _require(q.dtype == k.dtype == v.dtype == torch.bfloat16, "TND: bfloat16 only")
    n = a["num_heads"]
    _require(n in (8, 16, 32, 64, 128), "TND: N is 8, 16, 32, 64 or 128")
    _require(q.shape[1] == k.shape[1] == v.shape[1] == n, "TND: Q_N, K_N, V_N equal")
    _require((a["num_key_value_heads"] or n) == n, "TND: num_key_value_heads == num_heads")
    _require(
        q.shape[2] == k.shape[2] == 192 and v.shape[2] in (128, 192),
        "TND: Q_D = K_D = 192, V_D 128 or 192",
    )
    _require(q.shape[0] <= 65536, "TND: T <= 65536")
    q_ends, kv_ends = a["actual_seq_lengths"], a["actual_seq_lengths_kv"]
    _require(q_ends is not None and kv_ends is not None, "TND: both length lists are required")
    q_ends, kv_ends = [int(x) for x in q_ends], [int(x) for x in kv_ends]
    _require(len(q_ends) == len(kv_ends), "TND: one length per batch in both lists")
    _require(q_ends == sorted(q_ends) and kv_ends == sorted(kv_ends), "TND: running sums")
    _require(q_ends[-1] == q.shape[0] and kv_ends[-1] == k.shape[0], "TND: sums cover T")
    mode = a["sparse_mode"]
    if mode == 3:
        mask = a["atten_mask"]
        _require(
            mask is not None and tuple(mask.shape[-2:]) == (2048, 2048),
            "TND sparse_mode 3 needs the 2048x2048 mask",
        )
        _require(
            torch.equal(
                mask.reshape(2048, 2048).bool(),
                torch.ones(2048, 2048, dtype=torch.bool).triu(1),
            ),
            "sparse_mode 3 mask must be True strictly above the diagonal",
        )
    else:
        _require(mode == 0 and a["atten_mask"] is None, "TND: sparse 0 without mask, or 3")
    q_lens = [b - a for a, b in zip([0, *q_ends[:-1]], q_ends, strict=True)]
    kv_lens = [b - a for a, b in zip([0, *kv_ends[:-1]], kv_ends, strict=True)]
    for q_len, kv_len in zip(q_lens, kv_lens, strict=True):
        _require(0 <= q_len <= kv_len, "TND sparse_mode 3: each batch's q length <= kv length")
    # softmax(q k^T * scale, rightDownCausal) v per batch, in float32, rounded once. The
    # docs state no accumulation order; this takes torch's float32 SDPA over the batch
    # padded to its longest query and key (padded query rows see key 0 and are dropped),
    # the order the host's CpuMlaOps sums in, so both give the same bits.
    batch, max_q, max_k = len(q_lens), max(q_lens), max(kv_lens)
    q_pad = torch.zeros(batch, max_q, n, q.shape[2], dtype=F32)
    k_pad = torch.zeros(batch, max_k, n, k.shape[2], dtype=F32)
    v_pad = torch.zeros(batch, max_k, n, v.shape[2], dtype=F32)
    for b, (q_end, k_end) in enumerate(zip(q_ends, kv_ends, strict=True)):
        q_pad[b, : q_lens[b]] = q[q_end - q_lens[b] : q_end].to(F32)
        k_pad[b, : kv_lens[b]] = k[k_end - kv_lens[b] : k_end].to(F32)
        v_pad[b, : kv_lens[b]] = v[k_end - kv_lens[b] : k_end].to(F32)
    rows = torch.arange(max_q)[None, :, None]
    cols = torch.arange(max_k)[None, None, :]
    k_len = torch.tensor(kv_lens)[:, None, None]
    seen = cols < k_len
    if mode == 3:
        seen = seen & (cols <= rows + (k_len - torch.tensor(q_lens)[:, None, None]))
    padded = torch.nn.functional.scaled_dot_product_attention(
        q_pad.transpose(1, 2),
        k_pad.transpose(1, 2),
        v_pad.transpose(1, 2),
        attn_mask=(seen | (cols == 0))[:, None],
        scale=a["scale"],
    ).transpose(1, 2)  # [B, max_q, N, V_D]
    out = torch.cat([padded[b, : q_lens[b]] for b in range(batch)])
    return out.to(q.dtype), torch.zeros(1, dtype=F32)


def _mla_decode(a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    _common(a)
    q, k, v, q_rope, k_rope = a["query"], a["key"], a["value"], a["query_rope"], a["key_rope"]
    _require(q_rope is not None and k_rope is not None, "query_rope and key_rope go together")
    _require(q_rope.is_contiguous() and k_rope.is_contiguous(), "rope inputs must be contiguous")
    if a["input_layout"] != "BSND":
        raise NotImplementedError("MLA decode: only the BSND layout is modelled")
    _require(q.dtype in HALF_TYPES and q_rope.dtype == q.dtype, "MLA: fp16/bf16 query")
    _require(k.dtype == v.dtype == k_rope.dtype == q.dtype, "MLA: key dtypes match query")
    _require(q.dim() == 4 and q_rope.dim() == 4, "MLA BSND: query (B, S, N, D)")
    batch, q_s, n, d = q.shape
    _require(1 <= q_s <= 16, "MLA: query S is 1-16")
    _require(n in (32, 64, 128) and n == a["num_heads"], "MLA: query N is 32, 64 or 128")
    _require(d == 512 and tuple(q_rope.shape) == (batch, q_s, n, 64), "MLA: D 512, rope D 64")
    _require(a["num_key_value_heads"] == 1, "MLA: key N is 1")
    table, block_size = a["block_table"], a["block_size"]
    _require(table is not None, "MLA decode needs page attention")
    _require(block_size in (16, 128), "MLA: block_size 16 or 128")
    _require(k.dim() == 3 and tuple(k.shape[1:]) == (block_size, 512), "MLA: key (blocks, bs, 512)")
    _require(v.shape == k.shape, "MLA: key and value shapes equal")
    _require(tuple(k_rope.shape) == (k.shape[0], block_size, 64), "MLA: key_rope (blocks, bs, 64)")
    _require(
        table.dtype == torch.int32 and table.dim() == 2 and table.shape[0] == batch,
        "block_table int32 [B, max_blocks]",
    )
    if q_s == 1:
        _require(a["sparse_mode"] == 0 and a["atten_mask"] is None, "MLA S=1: sparse 0, no mask")
    else:
        raise NotImplementedError("MLA decode with S > 1 (speculative) is not modelled")
    kv_lens = [int(x) for x in a["actual_seq_lengths_kv"]]
    _require(len(kv_lens) >= batch, "actual_seq_lengths_kv: one per batch")
    # softmax((q k^T + q_rope k_rope^T) * scale) v, in float32, rounded once. The docs
    # state no accumulation order; this takes one float32 dot product over D + rope D and
    # the batch padded to its longest sequence (masked), the order the host's CpuMlaOps
    # sums in, so both give the same bits.
    max_len = max(kv_lens[:batch])
    keys = torch.zeros(batch, max_len, d + 64, dtype=F32)
    values = torch.zeros(batch, max_len, d, dtype=F32)
    for b in range(batch):
        length = kv_lens[b]
        blocks = table[b, : -(-length // block_size)].long()
        keys[b, :length, :d] = k.index_select(0, blocks).reshape(-1, d)[:length].to(F32)
        keys[b, :length, d:] = k_rope.index_select(0, blocks).reshape(-1, 64)[:length].to(F32)
        values[b, :length] = v.index_select(0, blocks).reshape(-1, d)[:length].to(F32)
    full_q = torch.cat((q[:, 0], q_rope[:, 0]), dim=-1).to(F32)  # [B, N, D + rope D]
    scores = torch.bmm(full_q, keys.transpose(1, 2)) * a["scale"]
    past_end = torch.arange(max_len)[None, :] >= torch.tensor(kv_lens[:batch])[:, None]
    scores = scores.masked_fill(past_end[:, None, :], float("-inf"))
    out = torch.bmm(scores.softmax(dim=-1), values).unsqueeze(1)  # [B, 1, N, D]
    return out.to(q.dtype), torch.zeros(1, dtype=F32)


IMPLEMENTED = {"npu_fused_infer_attention_score": npu_fused_infer_attention_score}
