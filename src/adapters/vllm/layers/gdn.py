"""Qwen3-Next's gated-delta-net layer on the linear-attention port.

vLLM's layer (QwenGatedDeltaNetAttention) keeps its projections, its gated norm and its
custom op (`vllm::qwen_gdn_attention_core`, opaque to Dynamo); the op calls the layer's
`_forward_core`, which here runs the convolution and the delta rule on the serving
device's LinearAttentionOps instead of vLLM's Triton (FLA) kernels. Decodes come first in
the step's rows (vLLM's GDN metadata orders them so), then prefills.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from vllm.forward_context import get_forward_context
from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import (
    QwenGatedDeltaNetAttention,
)
from vllm.model_executor.layers.mamba.mamba_utils import is_conv_state_dim_first

from adapters.container import container
from ports.linear_attention import LinearAttentionOps, StateSequences

L2_EPS = 1e-6  # as FLA's and transformers' l2norm: x / sqrt(sum(x^2) + eps)


def l2norm(x: torch.Tensor) -> torch.Tensor:
    xf = x.to(torch.float32)
    return (xf * torch.rsqrt((xf * xf).sum(-1, keepdim=True) + L2_EPS)).to(x.dtype)



def convolve(
    ops: LinearAttentionOps,
    meta: Any,
    mixed_qkv: torch.Tensor,
    weight: torch.Tensor,
    conv_states: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, StateSequences | None]:
    """The causal depthwise convolution of a step's packed q/k/v channels (decodes first,
    then prefills, as vLLM's GDN metadata orders them), each continuing its slot's state;
    also the step's state slots and its prefill sequences (None without prefills)."""
    decodes, decode_tokens = meta.num_decodes, meta.num_decode_tokens
    slots = meta.non_spec_state_indices_tensor
    prefill: StateSequences | None = None
    if meta.num_prefills > 0:
        prefill = StateSequences(
            meta.prefill_query_start_loc,
            meta.prefill_state_indices,
            meta.prefill_has_initial_state,
        )
    conv = torch.empty_like(mixed_qkv)
    if decodes:
        conv[:decode_tokens] = ops.causal_conv1d_update(
            mixed_qkv[:decode_tokens], weight, conv_states, slots[:decodes]
        )
    if prefill is not None:
        conv[decode_tokens:] = ops.causal_conv1d(
            mixed_qkv[decode_tokens:], weight, conv_states, prefill
        )
    return conv, slots, prefill


class AscendQwenGatedDeltaNetAttention(QwenGatedDeltaNetAttention):
    """vLLM's layer with its core (convolution + delta rule) on our port."""

    linear_ops: LinearAttentionOps

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.linear_ops = container().linear_attention_ops()
        # vLLM's generic path: projections, its custom op (-> _forward_core), the norm.
        self._forward_method = self.forward_cuda
        if self.speculative_config is not None:
            raise NotImplementedError(
                "speculative decoding with Qwen3-Next's linear-attention layers is not "
                "served by the Ascend plugin (the GDN layer takes one token per decode); "
                "serve without --speculative-config"
            )

    def _forward_core(
        self,
        mixed_qkv: torch.Tensor,
        b: torch.Tensor,
        a: torch.Tensor,
        core_attn_out: torch.Tensor,
    ) -> None:
        context = get_forward_context().attn_metadata
        meta = context.get(self.prefix) if isinstance(context, dict) else None
        if meta is None:
            return  # the profiling run: no states yet
        tokens = meta.num_actual_tokens
        decodes, decode_tokens = meta.num_decodes, meta.num_decode_tokens
        conv_states, ssm_states = self.kv_cache[0], self.kv_cache[1]
        if is_conv_state_dim_first():
            conv_states = conv_states.transpose(-1, -2)  # [slots, W-1, D], as the port takes
        weight = self.conv1d.weight.view(self.conv1d.weight.size(0), -1)  # [D, W]
        ops = self.linear_ops
        mixed_qkv, b, a = mixed_qkv[:tokens], b[:tokens], a[:tokens]
        conv, slots, prefill = convolve(ops, meta, mixed_qkv, weight, conv_states)

        tp = self.tp_size
        key_dim, value_dim = self.key_dim // tp, self.value_dim // tp
        q, k, v = conv.split([key_dim, key_dim, value_dim], dim=-1)
        q = l2norm(q.reshape(tokens, -1, self.head_k_dim))
        k = l2norm(k.reshape(tokens, -1, self.head_k_dim))
        v = v.reshape(tokens, -1, self.head_v_dim)
        beta = b.sigmoid()
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias.float())
        scale = self.head_k_dim**-0.5

        if decodes:
            rows = slice(0, decode_tokens)
            core_attn_out[rows] = ops.recurrent_gated_delta_rule(
                q[rows], k[rows], v[rows], g[rows], beta[rows], ssm_states,
                slots[:decodes], scale,
            )
        if prefill is not None:
            rows = slice(decode_tokens, tokens)
            core_attn_out[rows] = ops.chunk_gated_delta_rule(
                q[rows], k[rows], v[rows], g[rows], beta[rows], ssm_states, prefill, scale
            )
