"""Ops: the math a model layer or attention backend asks of the device.

Every device adapter implements the same semantics; the host adapter's is the
reference. Shapes use T for tokens, H for heads, D for head size, B for
sequences in the batch.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

from attrs import frozen

if TYPE_CHECKING:
    import torch


@frozen
class PagedAttentionMeta:
    """The batch layout of one attention call over a paged KV cache.

    query_start_loc: [B+1] cumulative query-token offsets of each sequence.
    seq_lens: [B] context length of each sequence, counting this step's tokens.
    block_table: [B, max_blocks] cache block ids of each sequence.
    max_query_len / max_seq_len: host-side maxima, so adapters need no sync.
    query_start_loc_host / seq_lens_host: the same offsets and lengths as host ints,
        from the runner's CPU-side copies of the batch (None: adapters read the tensors).
    prepared: what the device adapter's `prepare_attention` built for this step.
    """

    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    max_query_len: int
    max_seq_len: int
    num_actual_tokens: int
    query_start_loc_host: tuple[int, ...] | None = None
    seq_lens_host: tuple[int, ...] | None = None
    prepared: Any = None


class Ops(abc.ABC):
    """Device ops with one meaning across devices."""

    @abc.abstractmethod
    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """x * rsqrt(mean(x^2) + eps) * weight over the last dimension."""

    @abc.abstractmethod
    def add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(rms_norm(x + residual), x + residual)."""

    @abc.abstractmethod
    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """silu(x[..., :d]) * x[..., d:] for a last dimension of 2d."""

    @abc.abstractmethod
    def rotary_embedding(
        self,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor,
        cos_sin_cache: torch.Tensor,
        head_size: int,
        rotary_dim: int,
        is_neox_style: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate query [T, Hq*D] and key [T, Hk*D] by the cache rows at `positions`.

        cos_sin_cache is [max_position, rotary_dim] with cos in the first half.
        """

    @abc.abstractmethod
    def write_kv_cache(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """Store key/value [T, Hk, D] at flat slots (block * block_size + offset).

        Rows past len(slot_mapping) are padding. Every slot given must be a cache slot:
        vLLM pads with -1 only past num_actual_tokens, where the backend cuts the
        mapping (the host adapter also skips -1; a device adapter need not check).
        """

    def prepare_attention(self, meta: PagedAttentionMeta) -> PagedAttentionMeta:
        """Once per step, before any layer: `meta` with what every layer's attention call
        reuses in `prepared` (index tensors, host-side lengths). By default nothing."""
        return meta

    @abc.abstractmethod
    def paged_attention(
        self,
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        meta: PagedAttentionMeta,
        scale: float,
        out: torch.Tensor,
    ) -> torch.Tensor:
        """Causal attention of query [T, Hq, D] over each sequence's cached context.

        Caches are [num_blocks, block_size, Hk, D]. A query token at index i of a
        sequence with q_len new tokens and context seq_len sees cache positions
        0 .. seq_len - q_len + i. Covers prefill, decode and chunked prefill.
        Writes [T, Hq, D] into `out` and returns it.
        """
