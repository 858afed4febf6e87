"""DeepSeek-V4's MoE block in plain torch: hash or score routing, clamped SwiGLU experts.

Routing scores are sqrt(softplus(logits)) (config.scoring_func "sqrtsoftplus"); a score-routed
layer picks the top-k of score + correction bias, a hash-routed one (mlp_layer_types
"hash_moe") the fixed experts tid2eid[token id]; the picked scores, normalised and scaled by
routed_scaling_factor, weight the experts; one shared expert is always added. Gate and up
projections are clamped at swiglu_limit before SiLU(gate) * up.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class SwiGLU(nn.Module):
    """One expert (checkpoint: w1 gate, w3 up, w2 down)."""

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
    def __init__(self, config: Any, hashed: bool) -> None:
        super().__init__()
        hidden, inter = config.hidden_size, config.moe_intermediate_size
        limit = float(config.swiglu_limit)
        self.gate = Router(config, hashed)
        self.experts = nn.ModuleList(
            SwiGLU(hidden, inter, limit) for _ in range(config.n_routed_experts)
        )
        self.shared_experts = SwiGLU(hidden, inter, limit)  # transformers: one of width inter

    def forward(self, x: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
        picks, weights = self.gate(x, token_ids)
        out = torch.zeros_like(x)
        for e in picks.unique().tolist():
            rows, slot = torch.where(picks == e)
            part = self.experts[e](x[rows]) * weights[rows, slot, None]
            out.index_add_(0, rows, part.to(out.dtype))
        return out + self.shared_experts(x)
