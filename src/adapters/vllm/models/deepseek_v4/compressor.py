"""DeepSeek-V4's compressed KV rows and the lightning indexer's choice among them.

Computed over one request's whole context (its per-token attention inputs read back from
the paged cache), so the rows depend only on the prefix: chunked prefill, decode and a
prefix-cache hit all see the rows a single pass over the prompt would.

- rate 128 (HCA): row w pools tokens [128w, 128w + 128) with a softmax gate per channel
  (gate = the token's gate projection + a learned bias per position in the window);
- rate 4 (CSA): each token projects two series (Ca: the first head_dim channels, Cb: the
  rest); row w pools window w-1's Ca and window w's Cb over 2 x 4 slots (row 0: Cb only);
- each row RMS-normed, then rotated at its window's first position with the compress base.
Only complete windows make rows; query t may see row w once (w + 1) * rate <= t + 1.
Norms and rope through the ops port; the indexer's top-k through the sparse-MLA port's
lightning indexer (SparseMlaOps.index_topk), the rows as its paged key cache.
"""

from __future__ import annotations

import torch

from adapters.vllm.models.deepseek_v4.norms import rms_norm
from adapters.vllm.models.deepseek_v4.rope import rotate
from ports.ops import Ops
from ports.sparse_mla import SparseMlaOps

# Rows a block of the indexer's key cache holds (the engine's block size on the NPU).
INDEX_BLOCK = 128


def compressed_rows(
    ops: Ops,
    kv: torch.Tensor,
    gate: torch.Tensor,
    position_bias: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    rate: int,
    overlap: bool,
    freqs: torch.Tensor,
    scale: float = 1.0,
) -> torch.Tensor:
    """kv, gate [L, C] (C = 2 * D with overlap, else D) of tokens 0..L-1: the [L // rate, D]
    compressed rows of the complete windows."""
    windows = kv.shape[0] // rate
    width = kv.shape[1]
    if windows == 0:
        dim = width // 2 if overlap else width
        return kv.new_zeros((0, dim))
    kv = kv[: windows * rate].view(windows, rate, width)
    gate = gate[: windows * rate].view(windows, rate, width) + position_bias
    if overlap:
        dim = width // 2
        slots_kv = kv.new_zeros((windows, 2 * rate, dim))
        slots_gate = gate.new_full((windows, 2 * rate, dim), float("-inf"))
        slots_kv[:, rate:] = kv[..., dim:]
        slots_gate[:, rate:] = gate[..., dim:]
        slots_kv[1:, :rate] = kv[:-1, :, :dim]
        slots_gate[1:, :rate] = gate[:-1, :, :dim]
        kv, gate = slots_kv, slots_gate
    pooled = (kv * gate.softmax(dim=1, dtype=torch.float32).to(kv.dtype)).sum(dim=1)
    rows = rms_norm(ops, pooled, norm_weight, eps)
    starts = torch.arange(windows, device=kv.device) * rate
    return rotate(ops, rows.unsqueeze(1), starts, freqs, scale=scale).squeeze(1)


def visible_rows(positions: torch.Tensor, rate: int) -> torch.Tensor:
    """[T] query positions: how many compressed rows each may see ((t + 1) // rate)."""
    return torch.div(positions + 1, rate, rounding_mode="floor")


def indexer_top_k(
    sparse_ops: SparseMlaOps,
    q: torch.Tensor,
    keys: torch.Tensor,
    head_weights: torch.Tensor,
    positions: torch.Tensor,
    rate: int,
    top_k: int,
) -> torch.Tensor:
    """The lightning indexer: q [T, H, Di] (rotated), keys [W, Di] (the indexer's own
    compressed rows), head_weights [T, H] (already scaled): score(t, w) =
    sum_h head_weights[t, h] * relu(q[t, h] . keys[w]) / sqrt(Di); the top_k rows each query
    may see, as a [T, W] bool mask of the chosen rows.

    Through SparseMlaOps.index_topk: the rows as a paged key cache of INDEX_BLOCK-row
    blocks (every token's block-table row the same), each token's visible row count as its
    sequence length, 1 / sqrt(Di) folded into the head weights (relu commutes with a
    positive scale)."""
    windows, dim = keys.shape
    tokens = q.shape[0]
    if windows == 0:
        return torch.zeros((tokens, 0), dtype=torch.bool, device=q.device)
    blocks = -(-windows // INDEX_BLOCK)
    cache = keys.new_zeros((blocks * INDEX_BLOCK, dim))
    cache[:windows] = keys
    index_dtype = getattr(torch, sparse_ops.plan_needs.block_table_dtype.value)
    table = torch.arange(blocks, dtype=index_dtype, device=q.device).expand(tokens, blocks)
    picks = sparse_ops.index_topk(
        q.to(keys.dtype).contiguous(),
        (head_weights * dim**-0.5).to(keys.dtype),
        cache.view(blocks, INDEX_BLOCK, dim),
        table.contiguous(),
        visible_rows(positions, rate),
        windows,
        top_k,
    ).long()
    valid = picks >= 0
    hits = torch.nn.functional.one_hot(picks.clamp(min=0), windows).bool() & valid.unsqueeze(-1)
    return hits.any(dim=1)
