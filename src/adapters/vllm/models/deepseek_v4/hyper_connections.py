"""Manifold-constrained hyper-connections: DeepSeek-V4's residual of hc_mult streams.

Before each attention or MoE block a one-layer perceptron over the RMS-normed, flattened
streams gives three weights: `pre` (collapses the streams into the block's input), `post`
(spreads the block's output over the streams) and `comb` (mixes the streams, made doubly
stochastic by Sinkhorn iterations). The final head collapses the streams with its own `pre`.
"""

from __future__ import annotations

import torch
from torch import nn

from adapters.vllm.models.deepseek_v4.norms import rms_norm
from ports.ops import Ops


def hc_weights(
    ops: Ops, streams: torch.Tensor, fn: torch.Tensor, base: torch.Tensor, scale: torch.Tensor,
    iters: int, eps: float, norm_eps: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """streams [T, N, D]: (post [T, N], comb [T, N, N], collapsed input [T, D])."""
    n = streams.shape[1]
    flat = rms_norm(ops, streams.reshape(streams.shape[0], -1).float(), None, norm_eps)
    mixes = flat @ fn.float().t()
    pre_w, post_w, comb_w = mixes.split([n, n, n * n], dim=-1)
    pre_b, post_b, comb_b = base.float().split([n, n, n * n])
    pre_s, post_s, comb_s = scale.float().unbind(0)
    pre = torch.sigmoid(pre_w * pre_s + pre_b) + eps
    post = 2 * torch.sigmoid(post_w * post_s + post_b)
    comb = torch.softmax(comb_w.view(-1, n, n) * comb_s + comb_b.view(n, n), dim=-1) + eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    collapsed = (pre.unsqueeze(-1) * streams).sum(dim=1).to(streams.dtype)
    return post, comb, collapsed


def hc_merge(streams: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
             out: torch.Tensor) -> torch.Tensor:
    """The streams after a block: post spreads its output [T, D], comb^T mixes the streams."""
    dtype = streams.dtype
    return post.to(dtype).unsqueeze(-1) * out.unsqueeze(-2) + torch.matmul(
        comb.to(dtype).transpose(-1, -2), streams
    )


class HyperHead(nn.Module):
    """The last collapse of the streams, before the final norm (checkpoint: hc_head.*)."""

    def __init__(self, ops: Ops, hc_mult: int, hidden_size: int, eps: float,
                 norm_eps: float) -> None:
        super().__init__()
        self.ops = ops
        self.hc_fn = nn.Parameter(torch.empty(hc_mult, hc_mult * hidden_size))
        self.hc_base = nn.Parameter(torch.empty(hc_mult))
        self.hc_scale = nn.Parameter(torch.empty(1))
        self.eps, self.norm_eps = eps, norm_eps

    def forward(self, streams: torch.Tensor) -> torch.Tensor:
        flat = rms_norm(self.ops, streams.reshape(streams.shape[0], -1).float(), None,
                        self.norm_eps)
        mixes = flat @ self.hc_fn.float().t()
        pre = torch.sigmoid(mixes * self.hc_scale.float() + self.hc_base.float()) + self.eps
        return (pre.unsqueeze(-1) * streams).sum(dim=1).to(streams.dtype)
