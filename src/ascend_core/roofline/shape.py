"""A model's weights counted by role from its config.json, for the roofline.

Counts are parameters (elements), not bytes: the roofline applies the quantization's
width. Norms and biases are left out (under 0.01% of any model this counts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attrs import frozen

from ascend_core.errors import ConfigError
from ascend_core.model_facts import EXPERT_KEYS, KV_HEAD_KEYS, text_config


@frozen
class ModelShape:
    """Parameters per role; `per layer` counts are of one layer of that kind."""

    hidden: int
    layers: int
    vocab: int
    heads: int
    kv_heads: int  # standard attention's K/V heads (replicated over TP past this many)
    attention_sharded: int  # per layer: split over TP (q/o, MLA's q_b/kv_b/o)
    attention_kv: int  # per layer: K and V projections, split over min(tp, kv_heads)
    attention_replicated: int  # per layer: on every TP rank (MLA's q_a, kv_a)
    dense_layers: int
    dense_mlp: int  # per dense layer
    moe_layers: int
    experts: int  # routed experts per MoE layer
    experts_per_token: int
    expert: int  # one routed expert
    shared: int  # the shared experts of one MoE layer, together
    router: int  # per MoE layer
    # Attention's own FLOPs per query token, per context token, per layer (QK and PV).
    attention_flops_decode: int  # MLA: absorbed (the latent is the key and the value)
    attention_flops_prefill: int
    mtp_layers: int = 0  # num_nextn_predict_layers

    @property
    def per_token_params(self) -> int:
        """Parameters one token multiplies through (lm_head included, embedding not)."""
        return (
            self.layers * (self.attention_sharded + self.attention_kv + self.attention_replicated)
            + self.dense_layers * self.dense_mlp
            + self.moe_layers * (self.experts_per_token * self.expert + self.shared + self.router)
            + self.vocab * self.hidden
        )


def model_shape(config: Mapping[str, Any], source: str = "config.json") -> ModelShape:
    """The shape of a Llama/Qwen-style dense model, a Qwen/Mixtral-style MoE, or a DeepSeek
    MLA+MoE model. Raises ConfigError naming the key a count needs and the config lacks."""
    c = text_config(config)
    hidden = _need(c, "hidden_size", source)
    layers = _need(c, "num_hidden_layers", source)
    heads = _need(c, "num_attention_heads", source)
    vocab = _need(c, "vocab_size", source)
    kv_heads = _first(c, KV_HEAD_KEYS) or heads
    head_dim = _first(c, ("head_dim",)) or hidden // heads
    if c.get("kv_lora_rank") is not None:
        attention = _mla(c, hidden, heads, source)
        sharded, kv, replicated, decode, prefill = attention
    else:
        sharded = 2 * hidden * heads * head_dim  # q and o
        kv = 2 * hidden * kv_heads * head_dim
        replicated = 0
        decode = prefill = 2 * 2 * heads * head_dim  # QK and PV, a multiply and an add each
    experts = _first(c, EXPERT_KEYS) or 0
    intermediate = _first(c, ("intermediate_size",)) or 0
    moe_layers = _moe_layer_count(c, layers) if experts else 0
    expert_inter = _first(c, ("moe_intermediate_size",)) or intermediate
    shared_inter = _first(c, ("shared_expert_intermediate_size",)) or (
        (_first(c, ("n_shared_experts",)) or 0) * expert_inter
    )
    if layers - moe_layers and not intermediate:
        raise ConfigError(
            f"{source}: intermediate_size is missing; the dense MLP layers cannot be counted.",
            "use the config.json the model was published with",
        )
    return ModelShape(
        hidden=hidden,
        layers=layers,
        vocab=vocab,
        heads=heads,
        kv_heads=kv_heads,
        attention_sharded=sharded,
        attention_kv=kv,
        attention_replicated=replicated,
        dense_layers=layers - moe_layers,
        dense_mlp=3 * hidden * intermediate,
        moe_layers=moe_layers,
        experts=experts,
        experts_per_token=_first(c, ("num_experts_per_tok", "moe_topk")) or (2 if experts else 0),
        expert=3 * hidden * expert_inter if experts else 0,
        shared=3 * hidden * shared_inter if experts else 0,
        router=experts * hidden,
        attention_flops_decode=decode,
        attention_flops_prefill=prefill,
        mtp_layers=_first(c, ("num_nextn_predict_layers",)) or 0,
    )


def _mla(
    c: Mapping[str, Any], hidden: int, heads: int, source: str
) -> tuple[int, int, int, int, int]:
    """MLA: q_a (or q) and kv_a read on every TP rank, q_b/kv_b/o split by heads."""
    kv_rank = _need(c, "kv_lora_rank", source)
    rope = _first(c, ("qk_rope_head_dim",)) or 0
    nope = _first(c, ("qk_nope_head_dim",)) or 0
    v_dim = _first(c, ("v_head_dim",)) or nope
    q_rank = _first(c, ("q_lora_rank",))
    q_width = heads * (nope + rope)
    replicated = hidden * (kv_rank + rope)  # kv_a_proj_with_mqa
    if q_rank:
        replicated += hidden * q_rank  # q_a_proj
        sharded = q_rank * q_width  # q_b_proj
    else:
        sharded = hidden * q_width  # q_proj
    sharded += kv_rank * heads * (nope + v_dim) + heads * v_dim * hidden  # kv_b, o
    # Decode attends in the latent: QK over kv_lora_rank + rope, PV over kv_lora_rank.
    decode = 2 * heads * (kv_rank + rope + kv_rank)
    prefill = 2 * heads * (nope + rope + v_dim)
    return sharded, 0, replicated, decode, prefill


def _moe_layer_count(c: Mapping[str, Any], layers: int) -> int:
    """DeepSeek: layers from first_k_dense_replace, every moe_layer_freq; Qwen: every
    decoder_sparse_step-th layer outside mlp_only_layers; otherwise every layer."""
    first = _first(c, ("first_k_dense_replace",)) or 0
    freq = _first(c, ("moe_layer_freq",)) or 1
    step = _first(c, ("decoder_sparse_step",)) or 1
    only_dense = c.get("mlp_only_layers") or []
    dense = set(only_dense) if isinstance(only_dense, list) else set()
    return sum(
        1
        for i in range(layers)
        if i >= first and i % freq == 0 and (i + 1) % step == 0 and i not in dense
    )


def _first(c: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = c.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _need(c: Mapping[str, Any], key: str, source: str) -> int:
    value = _first(c, (key,))
    if value is None:
        raise ConfigError(
            f"{source}: {key} is {c.get(key)!r}, not a positive integer; the roofline "
            "needs it to count the weights.",
            "use the config.json the model was published with",
        )
    return value
