"""DeepSeek-V4's MoE block: hash or score routing in torch, clamped SwiGLU experts through
the device's MoE port.

Routing scores are sqrt(softplus(logits)) (config.scoring_func "sqrtsoftplus"); a score-routed
layer picks the top-k of score + correction bias, a hash-routed one (mlp_layer_types
"hash_moe") the fixed experts tid2eid[token id]; the picked scores, normalised and scaled by
routed_scaling_factor, weight the experts; one shared expert is always added. Gate and up
projections are clamped at swiglu_limit before SiLU(gate) * up (GateKind.SILU_CLAMPED).

The routing stays torch on the device: the MoE port's route (npu_moe_gating_top_k on the
NPU) scores by softmax or sigmoid, neither sqrtsoftplus nor a table of token ids. The routed
experts run as MoeOps.experts (permute, grouped matmuls, combine: npu_moe_init_routing_v2,
npu_grouped_matmul around npu_clipped_swiglu, npu_moe_token_unpermute on the NPU); the
shared expert is a dense SwiGLU in torch, as a dense layer's linears are on either device.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from adapters.container import container
from ports.moe import ExpertMlp, GateKind, Routing


class SwiGLU(nn.Module):
    """The shared expert (checkpoint: w1 gate, w3 up, w2 down)."""

    def __init__(self, hidden: int, inter: int, limit: float) -> None:
        super().__init__()
        self.w1 = nn.Linear(hidden, inter, bias=False)
        self.w2 = nn.Linear(inter, hidden, bias=False)
        self.w3 = nn.Linear(hidden, inter, bias=False)
        self.limit = limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.w1(x).clamp(max=self.limit)
        up = self.w3(x).clamp(min=-self.limit, max=self.limit)
        return self.w2(F.silu(gate) * up)


class Router(nn.Module):
    """The gate (checkpoint: gate.weight, gate.bias as the score correction, gate.tid2eid)."""

    def __init__(self, config: Any, hashed: bool) -> None:
        super().__init__()
        experts, self.top_k = config.n_routed_experts, config.num_experts_per_tok
        self.weight = nn.Parameter(torch.empty(experts, config.hidden_size))
        self.hashed = hashed
        if hashed:
            self.register_buffer("tid2eid", torch.zeros(config.vocab_size, self.top_k,
                                                        dtype=torch.long))
        else:
            self.bias = nn.Parameter(torch.zeros(experts), requires_grad=False)
        self.scale = float(config.routed_scaling_factor)

    def forward(
        self, x: torch.Tensor, token_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        scores = F.softplus(x @ self.weight.t()).sqrt()
        if self.hashed:
            picks = self.tid2eid[token_ids].long()
        else:
            picks = torch.topk(scores + self.bias, self.top_k, dim=-1, sorted=False).indices
        weights = scores.gather(1, picks)
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return picks, weights * self.scale


class MoE(nn.Module):
    """Router, the routed experts stacked as the MoE port takes them (w13 [E, 2I, H]: w1's
    rows, then w3's; w2 [E, H, I]), and the shared expert."""

    def __init__(self, config: Any, hashed: bool) -> None:
        super().__init__()
        hidden, inter = config.hidden_size, config.moe_intermediate_size
        experts = config.n_routed_experts
        limit = float(config.swiglu_limit)
        self.gate = Router(config, hashed)
        self.w13 = nn.Parameter(torch.empty(experts, 2 * inter, hidden), requires_grad=False)
        self.w2 = nn.Parameter(torch.empty(experts, hidden, inter), requires_grad=False)
        self.shared_experts = SwiGLU(hidden, inter, limit)  # transformers: one of width inter
        self.mlp = ExpertMlp(gate=GateKind.SILU_CLAMPED, limit=limit)
        self.moe_ops = container().moe_ops()
        # The port's check covers the expert count, the dtype and the gate; the routing is
        # this module's own (the softmax rule named here only fills the argument).
        self.moe_ops.check(Routing(top_k=self.gate.top_k), experts,
                           str(torch.get_default_dtype()).removeprefix("torch."), self.mlp)

    def load_expert(self, index: int, part: str, tensor: torch.Tensor) -> None:
        """One checkpoint tensor of expert `index`: w1 (gate), w3 (up) or w2 (down)."""
        inter = self.w2.shape[2]
        with torch.no_grad():
            if part == "w2":
                self.w2[index].copy_(tensor)
            else:
                rows = slice(0, inter) if part == "w1" else slice(inter, 2 * inter)
                self.w13[index, rows].copy_(tensor)

    def forward(self, x: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        picks, weights = self.gate(x, token_ids)
        routed = self.moe_ops.experts(x, picks.to(torch.int32), weights.float(), self.w13,
                                      self.w2, mlp=self.mlp)
        return routed + self.shared_experts(x)
