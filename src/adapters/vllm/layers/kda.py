"""Kimi-Linear's Kimi-delta-attention (KDA) layer on the linear-attention port.

vLLM's layer (KimiGatedDeltaNetAttention, a PluggableLayer) keeps its projections, its gated
output norm and its weight loading; its `_forward` (the convolution and the delta rule, in
vLLM as the bundled FLA Triton ops chunk_kda_with_fused_gate and fused_recurrent_kda*, Triton
causal_conv1d) runs here on the serving device's LinearAttentionOps: the gate is one decay per
key channel, g = -exp(A_log) softplus(f + dt_bias) [T, H, Dk], beta = sigmoid(b), q and k
l2-normalized, scale Dk^-0.5, the recurrent state float32. Decodes come first in the step's
rows (vLLM's GDN metadata orders them so), then prefills.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from vllm.forward_context import get_forward_context
from vllm.model_executor.layers.mamba.gdn.kimi_gdn_linear_attn import (
    KimiGatedDeltaNetAttention,
)
from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import _encode_layer_name
from vllm.model_executor.layers.mamba.mamba_utils import is_conv_state_dim_first

from adapters.container import container
from adapters.vllm.layers.gdn import convolve, l2norm
from ports.linear_attention import LinearAttentionOps


class AscendKimiDeltaAttention(KimiGatedDeltaNetAttention):
    """vLLM's KDA layer with its core (convolution + per-channel-gated delta rule) on our
    port."""

    linear_ops: LinearAttentionOps

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.linear_ops = container().linear_attention_ops()
        if self.speculative_config is not None:
            raise NotImplementedError(
                "speculative decoding with Kimi-Linear's KDA layers is not served by the "
                "Ascend plugin (the KDA layer takes one token per decode); serve without "
                "--speculative-config"
            )
        if self.gate_lower_bound is not None:
            raise NotImplementedError(
                f"{self.prefix}: a KDA gate lower bound (linear_attn_config."
                "gate_lower_bound, the 'safe gate') is not served by the Ascend plugin's KDA "
                "layer; Kimi-Linear's published configs set none"
            )

    def _forward(
        self,
        mixed_qkv: torch.Tensor,
        g1: torch.Tensor,
        g2: torch.Tensor,
        beta: torch.Tensor,
        core_attn_out: torch.Tensor,
    ) -> None:
        # The core reads the step's metadata (how many decodes, which slots) and loops on the
        # host: opaque to Dynamo, or a compiled model would replay the first step's batch
        # shape. vLLM's GDN core op (vllm::qwen_gdn_attention_core, a splitting op) calls the
        # named layer's _forward_core(mixed_qkv, b, a, core_attn_out); here b is KDA's beta
        # logits and a its forget-gate logits.
        torch.ops.vllm.qwen_gdn_attention_core(
            mixed_qkv, beta, g1, core_attn_out, layer_name=_encode_layer_name(self.prefix)
        )
        core_attn_out.copy_(self.o_norm(core_attn_out, g2))

    def _forward_core(
        self,
        mixed_qkv: torch.Tensor,
        b: torch.Tensor,
        a: torch.Tensor,
        core_attn_out: torch.Tensor,
    ) -> None:
        """mixed_qkv [T, 3P]; b the beta logits [1, T, H]; a the forget-gate logits
        [1, T, H, Dk]; core_attn_out [1, T, H, Dv], written in place."""
        beta, g1 = b, a
        context = get_forward_context().attn_metadata
        meta = context.get(self.prefix) if isinstance(context, dict) else None
        if meta is None:
            return  # the profiling run: no states yet
        tokens = meta.num_actual_tokens
        decodes, decode_tokens = meta.num_decodes, meta.num_decode_tokens
        conv_states, ssm_states = self.kv_cache[0], self.kv_cache[1]
        if is_conv_state_dim_first():
            conv_states = conv_states.transpose(-1, -2)  # [slots, W-1, D], as the port takes
        weight = self.conv1d.weight.view(self.conv1d.weight.size(0), -1)  # [3P, W]
        ops = self.linear_ops
        mixed_qkv = mixed_qkv[:tokens]
        # q, k and v's depthwise convolutions are one over their packed channels.
        conv, slots, prefill = convolve(ops, meta, mixed_qkv, weight, conv_states)

        heads, dim = self.local_num_heads, self.head_dim
        q, k, v = (x.reshape(tokens, heads, dim) for x in conv.split(heads * dim, dim=-1))
        q, k = l2norm(q), l2norm(k)
        raw_g = g1[0, :tokens].float() + self.dt_bias.float().view(heads, dim)
        g = -self.A_log.float().exp()[:, None] * F.softplus(raw_g)  # [T, H, Dk]
        b = beta[0, :tokens].float().sigmoid()  # [T, H]
        scale = dim**-0.5
        out = core_attn_out[0]

        if decodes:
            rows = slice(0, decode_tokens)
            out[rows] = ops.recurrent_gated_delta_rule(
                q[rows], k[rows], v[rows], g[rows], b[rows], ssm_states, slots[:decodes], scale
            )
        if prefill is not None:
            rows = slice(decode_tokens, tokens)
            out[rows] = ops.chunk_gated_delta_rule(
                q[rows], k[rows], v[rows], g[rows], b[rows], ssm_states, prefill, scale
            )
