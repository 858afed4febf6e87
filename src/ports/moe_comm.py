"""Expert parallelism's token exchange: each rank's tokens reach the ranks holding their
experts and come back combined (the MoE communication method the core chose for the step).

The EP group's ranks hold equal slices of the routed experts (rank r: experts
[r * E_local, (r + 1) * E_local), vLLM's linear placement).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

from attrs import frozen

from ports.moe import SILU_MLP, ExpertMlp

if TYPE_CHECKING:
    import torch


@frozen
class ExpertParallelGroup:
    """The expert-parallel group as a MoE layer sees it.

    group: the device's torch.distributed process group of the EP ranks; size, rank: this
    rank's place in it; num_experts: routed experts in all; max_tokens: the most tokens any
    rank brings to this step (MC2's global_bs is max_tokens x size).
    """

    group: Any
    size: int
    rank: int
    num_experts: int
    max_tokens: int


class MoeCommOps(abc.ABC):
    """The expert-parallel role of a device adapter (the NPU's: MC2, all-to-all, all-gather)."""

    @abc.abstractmethod
    def ep_experts(
        self,
        method: str,
        hidden: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        ep: ExpertParallelGroup,
        mlp: ExpertMlp = SILU_MLP,
    ) -> torch.Tensor:
        """[T, H]: this rank's tokens (hidden [T, H], their global expert ids [T, k] and
        routing weights [T, k] float32) through all the group's experts, exchanged by
        `method` (a MoeCommMethod value: "mc2", "alltoall", "allgather"); w13 [E_local,
        2I, H] and w2 [E_local, H, I] are this rank's experts. Every rank of the group
        calls it for the same step with the same method."""

    @abc.abstractmethod
    def ep_experts_w8a8_dynamic(
        self,
        method: str,
        hidden: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        w13: torch.Tensor,
        w13_scale: torch.Tensor,
        w2: torch.Tensor,
        w2_scale: torch.Tensor,
        ep: ExpertParallelGroup,
    ) -> torch.Tensor:
        """ep_experts with W8A8_DYNAMIC experts (SiLU, no biases): int8 w13 [E_local, H,
        2I] and w2 [E_local, I, H] as QuantMoeOps.prepare_weights gives them, their
        per-channel float32 scales [E_local, 2I] and [E_local, H]. Where the method sends
        the tokens to their experts' ranks (MC2, all-to-all) they travel quantized per
        token: int8 rows and their float32 scales, which feed the first int8 grouped
        matmul as they arrive."""
