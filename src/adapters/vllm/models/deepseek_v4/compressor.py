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
"""

from __future__ import annotations

import torch

from adapters.vllm.models.deepseek_v4.norms import rms_norm
from adapters.vllm.models.deepseek_v4.rope import rotate


def compressed_rows(
    kv: torch.Tensor,
    gate: torch.Tensor,
    position_bias: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    rate: int,
    overlap: bool,
    freqs: torch.Tensor,
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
    rows = rms_norm(pooled, norm_weight, eps)
    starts = torch.arange(windows, device=kv.device) * rate
    return rotate(rows.unsqueeze(1), starts, freqs).squeeze(1)


def visible_rows(positions: torch.Tensor, rate: int) -> torch.Tensor:
    """[T] query positions: how many compressed rows each may see ((t + 1) // rate)."""
    return torch.div(positions + 1, rate, rounding_mode="floor")


def indexer_top_k(
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
    may see, as a [T, W] bool mask of the chosen rows."""
    windows = keys.shape[0]
    if windows == 0:
        return torch.zeros((q.shape[0], 0), dtype=torch.bool, device=q.device)
    scores = torch.einsum("thd,wd->thw", q.float(), keys.float()).relu() * q.shape[-1] ** -0.5
    scores = (scores * head_weights.float().unsqueeze(-1)).sum(dim=1)  # [T, W]
    visible = visible_rows(positions, rate)
    future = torch.arange(windows, device=q.device)[None, :] >= visible[:, None]
    scores = scores.masked_fill(future, float("-inf"))
    picks = scores.topk(min(top_k, windows), dim=-1).indices
    valid = picks < visible[:, None]
    hits = torch.nn.functional.one_hot(picks, windows).bool() & valid.unsqueeze(-1)
    return hits.any(dim=1)
