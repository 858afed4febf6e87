"""MLA ops: the paged latent cache, prefill over expanded keys/values, absorbed decode.

A latent cache is two planes with the same paging: `latent` [num_blocks, block_size, L]
(the compressed KV, kv_lora_rank L) and `rope` [num_blocks, block_size, R] (the rope key
shared by all heads, qk_rope_head_dim R), each contiguous, as torch_npu's MLA attention
takes them. N query heads; T tokens; B sequences. The sequences of a call are a part of
the step's AttentionPlan (ports.ops), built once per step: its lengths as host ints and
its index tensors on the device, so a device reads no length back.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import frozen

from ports.ops import AttentionPart, AttentionPlan, AttentionPlanNeeds

if TYPE_CHECKING:
    import torch


@frozen
class LatentCache:
    """One layer's latent cache: the two planes, paged alike."""

    latent: torch.Tensor  # [num_blocks, block_size, L]
    rope: torch.Tensor  # [num_blocks, block_size, R]


class MlaOps(abc.ABC):
    """The MLA role of a device adapter."""

    #: What this device's MLA ops read from the step's AttentionPlan parts.
    plan_needs: ClassVar[AttentionPlanNeeds] = AttentionPlanNeeds()

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
    def gather_latent(self, cache: LatentCache, part: AttentionPart) -> torch.Tensor:
        """[sum(seq_lens), L + R]: positions 0 .. seq_len - 1 of each of the part's
        sequences, concatenated (its block_table and seq_lens)."""

    @abc.abstractmethod
    def prefill_attention(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        part: AttentionPart,
        scale: float,
    ) -> torch.Tensor:
        """Causal attention over the part's ragged sequences: query [Tq, N, Dqk] (its new
        tokens) against key [Tk, N, Dqk], value [Tk, N, Dv] (each sequence's whole
        context, seq_len rows), sequences concatenated in the same order.

        The queries of a sequence are its last query_len positions: query i sees
        keys 0 .. seq_len - query_len + i. Returns [Tq, N, Dv] in the query's dtype.
        """

    @abc.abstractmethod
    def latent_decode(
        self,
        query_latent: torch.Tensor,
        query_rope: torch.Tensor,
        cache: LatentCache,
        part: AttentionPart,
        scale: float,
    ) -> torch.Tensor:
        """One new token per sequence of the decode part, attending in latent space
        (absorbed projections), over its block_table and seq_lens.

        query_latent [B, N, L] (q_nope already multiplied by W_UK), query_rope [B, N, R];
        score = scale * (q_latent . latent + q_rope . rope_key) over the cache rows
        0 .. seq_len - 1; output [B, N, L] = softmax(score) @ latent, query dtype.
        """

    def graph_host_arguments(self, plan: AttentionPlan) -> list[dict[str, Any]]:
        """The host-side arguments of the ops one MLA layer launches for `plan`, one dict
        per launch in launch order (vLLM's MLA layer runs the prefill part, then the
        decode part), keyed by the op's parameter names: what a captured graph's
        updatable ops must be given before they run again (DeviceGraphs.update). Empty on
        a device whose ops read all of the plan from device memory."""
        return []
