"""The sparse-MLA role in plain torch on the host: the indexer's key cache and top-k,
attention over the selected latent rows (batched over tokens; math in float32), and
DeepSeek-V4's sink attention (one sequence; in the query's dtype, as V4's reference)."""

from __future__ import annotations

import torch

from adapters.torch.paged_rows import slot_rows
from ports.mla import LatentCache
from ports.ops import AttentionPlanNeeds, IndexDtype
from ports.sparse_mla import SparseMlaOps

_F32 = torch.float32


def _rows(
    block_table: torch.Tensor, positions: torch.Tensor, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(block, offset) of positions [T, K] (>= 0) through each token's block-table row."""
    blocks = torch.gather(block_table.long(), 1, torch.div(positions, block_size,
                                                           rounding_mode="floor"))
    return blocks, positions % block_size


class CpuSparseMlaOps(SparseMlaOps):
    """Stateless; every result is a new tensor (the cache write is in place)."""

    plan_needs = AttentionPlanNeeds(block_table_dtype=IndexDtype.INT64, token_rows=True)

    def write_index_keys(
        self, keys: torch.Tensor, cache: torch.Tensor, slot_mapping: torch.Tensor
    ) -> None:
        at, (keys,) = slot_rows(slot_mapping, cache.shape[1], keys)
        cache.index_put_(at, keys.to(cache.dtype))

    def index_topk(
        self,
        query: torch.Tensor,
        weights: torch.Tensor,
        cache: torch.Tensor,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        topk: int,
    ) -> torch.Tensor:
        tokens = query.shape[0]
        width = max(max_seq_len, 1)
        pos = torch.arange(width).expand(tokens, width)
        valid = pos < seq_lens[:, None].long()
        keys = cache[_rows(block_table, torch.where(valid, pos, 0), cache.shape[1])]
        scores = torch.einsum("thd,tsd->ths", query.to(_F32), keys.to(_F32)).relu()
        index = torch.einsum("th,ths->ts", weights.to(_F32), scores)
        index = index.masked_fill(~valid, float("-inf"))
        kept = min(topk, width)
        values, picked = index.topk(kept, dim=-1)
        picked = torch.where(values == float("-inf"), -1, picked)
        out = torch.full((tokens, topk), -1, dtype=torch.int32)
        out[:, :kept] = picked.to(torch.int32)
        return out

    def sparse_attention(
        self,
        query_latent: torch.Tensor,
        query_rope: torch.Tensor,
        cache: LatentCache,
        indices: torch.Tensor,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        latent_dim = query_latent.shape[-1]
        selected = (indices.long() >= 0) & (indices.long() < seq_lens[:, None].long())
        at = _rows(block_table, torch.where(selected, indices.long(), 0), cache.latent.shape[1])
        rows = torch.cat((cache.latent[at], cache.rope[at]), dim=-1).to(_F32)  # [T, K, L+R]
        query = torch.cat((query_latent, query_rope), dim=-1).to(_F32)  # [T, N, L+R]
        scores = torch.bmm(query, rows.transpose(1, 2)) * scale  # [T, N, K]
        scores = scores.masked_fill(~selected[:, None, :], float("-inf"))
        out = torch.bmm(scores.softmax(dim=-1), rows[..., :latent_dim])
        return out.to(query_latent.dtype)

    def sink_attention(
        self,
        query: torch.Tensor,
        rows: torch.Tensor,
        visible: torch.Tensor,
        sinks: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        """In the query's dtype, as DeepSeek-V4's reference writes it: the sink one more
        column of the logits, dropped after the softmax."""
        logits = torch.einsum("thd,kd->thk", query, rows) * scale
        logits = logits.masked_fill(~visible[:, None, :], float("-inf"))
        sink = sinks.to(logits.dtype).view(1, -1, 1).expand(query.shape[0], -1, 1)
        combined = torch.cat([logits, sink], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        probs = torch.softmax(combined, dim=-1)[..., :-1]
        return torch.einsum("thk,kd->thd", probs, rows)
