"""The MLA role in plain torch on the host: latent cache, ragged prefill, latent decode.

Batched over sequences (no per-sequence Python loop); attention math in float32,
results in the query's dtype.
"""

from __future__ import annotations

import torch

from adapters.torch.paged_rows import gather_planes, slot_rows
from ports.mla import LatentCache, MlaOps
from ports.ops import AttentionPart, AttentionPlanNeeds, IndexDtype

_F32 = torch.float32


class CpuMlaOps(MlaOps):
    """Stateless; every result is a new tensor (the cache write is in place)."""

    plan_needs = AttentionPlanNeeds(block_table_dtype=IndexDtype.INT64)

    def write_latent_cache(
        self,
        latent: torch.Tensor,
        rope_key: torch.Tensor,
        cache: LatentCache,
        slot_mapping: torch.Tensor,
    ) -> None:
        """Padding tokens past len(slot_mapping) are ignored; values take the cache dtype."""
        at, (latent, rope_key) = slot_rows(slot_mapping, cache.latent.shape[1], latent, rope_key)
        # Two-index index_put_ writes through any strided view of the planes.
        cache.latent.index_put_(at, latent.to(cache.latent.dtype))
        cache.rope.index_put_(at, rope_key.to(cache.rope.dtype))

    def gather_latent(self, cache: LatentCache, part: AttentionPart) -> torch.Tensor:
        return gather_planes((cache.latent, cache.rope), part)

    def prefill_attention(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        part: AttentionPart,
        scale: float,
    ) -> torch.Tensor:
        """Padded to [B, N, max_len, D], one SDPA with an explicit causal-offset mask."""
        q_lens, k_lens = part.query_lens, part.seq_lens
        max_q, max_k = part.max_query_len, max(part.actual_seq_lens)
        q_pad, q_at = _pad(query, q_lens, max_q)
        k_pad, _ = _pad(key, k_lens, max_k)
        v_pad, _ = _pad(value, k_lens, max_k)
        rows = torch.arange(max_q)[None, :, None]
        cols = torch.arange(max_k)[None, None, :]
        last = (k_lens - q_lens)[:, None, None] + rows
        # Padded query rows see key 0 so their softmax stays finite (they are dropped).
        mask = ((cols <= last) & (cols < k_lens[:, None, None])) | (cols == 0)
        out = torch.nn.functional.scaled_dot_product_attention(
            q_pad.transpose(1, 2),
            k_pad.transpose(1, 2),
            v_pad.transpose(1, 2),
            attn_mask=mask[:, None],
            scale=scale,
        )  # [B, N, max_q, Dv]
        num_seqs, heads, _, v_dim = out.shape
        out = out.transpose(1, 2).reshape(num_seqs * max_q, heads, v_dim)
        return out.index_select(0, q_at).to(query.dtype)

    def latent_decode(
        self,
        query_latent: torch.Tensor,
        query_rope: torch.Tensor,
        cache: LatentCache,
        part: AttentionPart,
        scale: float,
    ) -> torch.Tensor:
        """MQA over the latent rows: one key/value row per position shared by all heads."""
        lens = part.seq_lens
        latent_dim = query_latent.shape[-1]
        max_len = max(part.actual_seq_lens)
        block_size = cache.latent.shape[1]
        pos = torch.arange(max_len)
        valid = pos[None, :] < lens[:, None]
        blocks = part.block_table.index_select(
            1, torch.div(pos, block_size, rounding_mode="floor")
        )
        # Positions past a sequence's end read its first row (written, so finite).
        blocks = torch.where(valid, blocks, blocks[:, :1])
        offsets = torch.where(valid, pos % block_size, 0)
        at = (blocks, offsets)
        rows = torch.cat((cache.latent[at], cache.rope[at]), dim=-1).to(_F32)  # [B, len, L+R]
        query = torch.cat((query_latent, query_rope), dim=-1).to(_F32)  # [B, N, L + R]
        scores = torch.bmm(query, rows.transpose(1, 2)) * scale  # [B, N, max_len]
        scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
        out = torch.bmm(scores.softmax(dim=-1), rows[..., :latent_dim])
        return out.to(query_latent.dtype)


def _ragged_positions(lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For concatenated sequences of host `lens`: each row's sequence and position in it."""
    total = int(lens.sum())
    seq_of = torch.repeat_interleave(torch.arange(lens.shape[0]), lens, output_size=total)
    starts = torch.cumsum(lens, 0) - lens
    return seq_of, torch.arange(total) - starts.index_select(0, seq_of)


def _pad(x: torch.Tensor, lens: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged [sum(lens), N, D] -> float32 [B, width, N, D], and each row's flat index."""
    seq_of, pos = _ragged_positions(lens)
    at = seq_of * width + pos
    padded = torch.zeros(lens.shape[0] * width, *x.shape[1:], dtype=_F32)
    padded.index_copy_(0, at, x.to(_F32))
    return padded.view(lens.shape[0], width, *x.shape[1:]), at
