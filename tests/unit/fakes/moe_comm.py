"""A deliberately wrong expert map behind ports.moe_comm.MoeCommOps: each token is sent to
the rank after the one holding its expert (global expert e goes to the same slot of the
next rank, e + E_local mod E), so it meets another expert there and comes back. An
expert-parallel run through it must leave the single-device ids: the tests that prove
the exchange right would also catch tokens reaching the wrong rank.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ports.moe import SILU_MLP, ExpertMlp
from ports.moe_comm import ExpertParallelGroup, MoeCommOps

if TYPE_CHECKING:
    import torch


class MisroutedMoeComm(MoeCommOps):
    """The device's MoeCommOps with every expert id moved one rank on."""

    def __init__(self, inner: MoeCommOps) -> None:
        self.inner = inner

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
        local = ep.num_experts // ep.size
        wrong = (ids + local) % ep.num_experts
        return self.inner.ep_experts(method, hidden, wrong, weights, w13, w2, ep, mlp)

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
        local = ep.num_experts // ep.size
        wrong = (ids + local) % ep.num_experts
        return self.inner.ep_experts_w8a8_dynamic(
            method, hidden, wrong, weights, w13, w13_scale, w2, w2_scale, ep
        )
