"""One DeepSeek-V4 decoder layer: hyper-connected attention and MoE blocks.

Checkpoint names as DeepSeek publishes them (attn_norm, attn.*, ffn_norm, ffn.*,
hc_attn_{fn,base,scale}, hc_ffn_{fn,base,scale}), so weights load by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from adapters.vllm.models.deepseek_v4.attention import Norm, V4Attention
from adapters.vllm.models.deepseek_v4.hyper_connections import hc_merge, hc_weights
from adapters.vllm.models.deepseek_v4.moe import MoE
from adapters.vllm.models.deepseek_v4.norms import rms_norm

# (attention inputs of this step's tokens [T, hidden]) -> their attention outputs [T, hidden]
Attend = Callable[[torch.Tensor], torch.Tensor]


class DecoderLayer(nn.Module):
    def __init__(self, config: Any, index: int) -> None:
        super().__init__()
        hidden, n = config.hidden_size, config.hc_mult
        self.eps = float(config.rms_norm_eps)
        self.hc_iters, self.hc_eps = int(config.hc_sinkhorn_iters), float(config.hc_eps)
        self.attn_norm = Norm(hidden)
        self.ffn_norm = Norm(hidden)
        self.attn = V4Attention(config, config.layer_types[index])
        self.ffn = MoE(config, hashed=config.mlp_layer_types[index] == "hash_moe")
        mixes = (2 + n) * n
        for block in ("attn", "ffn"):
            self.register_parameter(f"hc_{block}_fn", nn.Parameter(torch.empty(mixes, n * hidden)))
            self.register_parameter(f"hc_{block}_base", nn.Parameter(torch.empty(mixes)))
            self.register_parameter(f"hc_{block}_scale", nn.Parameter(torch.empty(3)))

    def _hc(self, block: str, streams: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return hc_weights(self.attn.ops, streams, getattr(self, f"hc_{block}_fn"),
                          getattr(self, f"hc_{block}_base"), getattr(self, f"hc_{block}_scale"),
                          self.hc_iters, self.hc_eps, self.eps)

    def forward(self, streams: torch.Tensor, token_ids: torch.Tensor,
                attend: Attend) -> torch.Tensor:
        post, comb, collapsed = self._hc("attn", streams)
        ops = self.attn.ops
        out = attend(rms_norm(ops, collapsed, self.attn_norm.weight, self.eps))
        streams = hc_merge(streams, post, comb, out)
        post, comb, collapsed = self._hc("ffn", streams)
        out = self.ffn(rms_norm(ops, collapsed, self.ffn_norm.weight, self.eps), token_ids)
        return hc_merge(streams, post, comb, out)
