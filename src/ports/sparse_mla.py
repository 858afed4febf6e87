"""Sparse MLA ops (DeepSeek sparse attention, DSA): the lightning indexer and the sparse
latent attention over the rows it selects.

Every new token is a row of its own (AttentionPlanNeeds.token_rows): its sequence's
block-table row and its context length (the positions 0 .. len - 1 it may see, itself
last). The indexer keeps one key per token (index_head_dim D, H index heads) in its own
paged cache [num_blocks, block_size, D], paged as the latent cache. Selected positions
are positions within the token's own sequence; -1 pads a row that has fewer than top-k.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, ClassVar

from ports.ops import AttentionPlanNeeds

if TYPE_CHECKING:
    import torch

    from ports.mla import LatentCache


class SparseMlaOps(abc.ABC):
    """The sparse-MLA role of a device adapter."""

    #: What this device's sparse MLA ops read from the step's AttentionPlan.
    plan_needs: ClassVar[AttentionPlanNeeds] = AttentionPlanNeeds(token_rows=True)

    def check(self, num_heads: int, latent_dim: int, rope_dim: int, index_heads: int,  # noqa: B027
              index_dim: int, topk: int, block_size: int, dtype_name: str) -> None:
        """Raise UnsupportedFeatureError (with the limit) for shapes this device's ops
        cannot run; called when a sparse MLA layer is built. Default: all."""

    @abc.abstractmethod
    def write_index_keys(
        self, keys: torch.Tensor, cache: torch.Tensor, slot_mapping: torch.Tensor
    ) -> None:
        """Store the indexer's keys [T, D] at flat slots of cache [blocks, block_size, D];
        -1 skips; rows past len(slot_mapping) are padding."""

    @abc.abstractmethod
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
        """The lightning indexer: for token t (query [T, H, D], weights [T, H], already
        scaled, in the query's dtype),
        score(t, p) = sum_h weights[t, h] * relu(query[t, h] . key(p)) over its positions
        p < seq_lens[t] (block_table [T, max_blocks], seq_lens [T]); returns the top-k
        positions [T, topk] int32, highest score first, -1 past seq_lens[t].
        max_seq_len: the largest seq_lens, as a host int."""

    @abc.abstractmethod
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
        """Absorbed MLA attention of each token over its selected rows only.

        query_latent [T, N, L] (q_nope times W_UK), query_rope [T, N, R], indices [T, K]
        positions in the token's sequence (-1: none; at or past seq_lens[t]: ignored),
        block_table [T, max_blocks], seq_lens [T] (each token's position + 1);
        score = scale * (q_latent . latent + q_rope . rope_key) over the selected rows,
        output [T, N, L] = softmax(score) @ latent, in the query's dtype.
        """

    @abc.abstractmethod
    def sink_attention(
        self,
        query: torch.Tensor,
        rows: torch.Tensor,
        visible: torch.Tensor,
        sinks: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        """DeepSeek-V4's attention of one sequence's new tokens over its rows, with a
        learned sink logit per head.

        query [T, N, D]; rows [R, D], one shared head (keys = values); visible [T, R] bool,
        the rows each token sees (at least one); sinks [N] float32. For token t, head h:
        p = softmax over {scale * query[t, h] . rows[r] : visible[t, r]} and sinks[h] (a
        logit without a value), output [T, N, D] = sum_r p_r rows[r], in the query's dtype.
        """
