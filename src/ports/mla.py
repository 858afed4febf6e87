"""MLA ops: the paged latent cache, prefill over expanded keys/values, absorbed decode.

A latent cache is two planes with the same paging: `latent` [num_blocks, block_size, L]
(the compressed KV, kv_lora_rank L) and `rope` [num_blocks, block_size, R] (the rope key
shared by all heads, qk_rope_head_dim R), each contiguous, as torch_npu's MLA attention
takes them. N query heads; T tokens; B sequences. Lengths (seq_lens, query_lens,
kv_lens) are host tensors: a device reads them without waiting for its stream.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from attrs import frozen

if TYPE_CHECKING:
    import torch


@frozen
class LatentCache:
    """One layer's latent cache: the two planes, paged alike."""

    latent: torch.Tensor  # [num_blocks, block_size, L]
    rope: torch.Tensor  # [num_blocks, block_size, R]


class MlaOps(abc.ABC):
    """The MLA role of a device adapter."""

    def check(self, num_heads: int, latent_dim: int, rope_dim: int, qk_dim: int,  # noqa: B027
              v_dim: int, block_size: int, dtype_name: str) -> None:
        """Raise UnsupportedFeatureError (with the limit) for MLA shapes this device's ops
        cannot run; called when an MLA layer is built, before weights load. Default: all."""

    @abc.abstractmethod
    def write_latent_cache(
        self,
        latent: torch.Tensor,
        rope_key: torch.Tensor,
        cache: LatentCache,
        slot_mapping: torch.Tensor,
    ) -> None:
        """Store latent [T, L] and rope_key [T, R] (or [T, 1, R]) at flat slots; -1 skips."""

    @abc.abstractmethod
    def gather_latent(
        self, cache: LatentCache, block_table: torch.Tensor, seq_lens: torch.Tensor
    ) -> torch.Tensor:
        """[sum(seq_lens), L + R]: positions 0 .. seq_len - 1 of each sequence, concatenated.

        block_table [B, max_blocks]; seq_lens [B] (host-readable lengths).
        """

    @abc.abstractmethod
    def prefill_attention(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        query_lens: torch.Tensor,
        kv_lens: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        """Causal attention over ragged sequences: query [Tq, N, Dqk] against key
        [Tk, N, Dqk], value [Tk, N, Dv], sequences concatenated in the same order.

        The queries of a sequence are its last query_len positions: query i sees
        keys 0 .. kv_len - query_len + i. Returns [Tq, N, Dv] in the query's dtype.
        """

    @abc.abstractmethod
    def latent_decode(
        self,
        query_latent: torch.Tensor,
        query_rope: torch.Tensor,
        cache: LatentCache,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        """One new token per sequence, attending in latent space (absorbed projections).

        query_latent [B, N, L] (q_nope already multiplied by W_UK), query_rope [B, N, R];
        score = scale * (q_latent . latent + q_rope . rope_key) over the cache rows
        0 .. seq_len - 1; output [B, N, L] = softmax(score) @ latent, query dtype.
        """
