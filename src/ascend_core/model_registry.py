"""Model registration as data: architecture -> whose model class serves it, and why.

The vLLM adapter registers the rows of our own implementations with vLLM's `ModelRegistry`
(an `Implementation.OURS` row names its architecture only; the adapter's `MODEL_CLASSES`,
adapters/vllm/models/__init__.py, says which class, imported lazily); the rows of vLLM's
own models only say which of vLLM's classes serves and what the plugin supplies under it.
The doctor prints the row for the model at hand; a test keeps this table and the support
matrix in agreement.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from attrs import field, frozen

from ascend_core.deployment import Deployment
from ascend_core.model_facts import model_facts_from_config
from ascend_core.support.check import features_of
from ascend_core.support.features import Feature, speculative_feature
from ascend_core.support.matrix import Supported, verdict
from ports.device import ChipFamily, DeviceKind


class Implementation(enum.Enum):
    """Whose model class vLLM instantiates for the architecture."""

    OURS = "ours"
    VLLM = "vLLM's own"


def _class_path(instance: Registration, _attribute: object, value: str | None) -> None:
    if instance.implementation_kind is Implementation.OURS:
        if value is not None:
            raise ValueError(
                f"{instance.architecture}: a row of our own names no class (the core names "
                "no adapter module); add the class to the vLLM adapter's MODEL_CLASSES"
            )
        return
    module, _, cls = (value or "").partition(":")
    if not module or not cls or ":" in cls:
        raise ValueError(f"implementation {value!r} is not `package.module:Class`")


# Any shape: the features the matrix rules on come from the keys a row's config sets.
_SHAPE = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2}


@frozen
class Registration:
    """One architecture (hf_config.architectures[0]) and the model class that serves it.

    implementation: vLLM's own class, `package.module:Class` (where vLLM's registry points; a
    test checks it against the installed vLLM); None for ours (the vLLM adapter's
    MODEL_CLASSES maps the architecture to its class).
    config: the keys of the architecture's published config.json that decide which of the
    support matrix's model features it uses (MLA, experts, layer kinds, windows).
    speculative_method: set for a draft model: the speculative_config method it drafts for.
    """

    architecture: str
    implementation_kind: Implementation
    implementation: str | None = field(validator=_class_path)
    why: str
    config: Mapping[str, Any] = field(factory=dict, hash=False)
    speculative_method: str | None = None

    @property
    def features(self) -> tuple[Feature, ...]:
        """The matrix's features the architecture uses, as the plan derives them."""
        if self.speculative_method is not None:
            return (speculative_feature(self.speculative_method),)
        config = {**_SHAPE, **self.config, "architectures": [self.architecture]}
        facts = model_facts_from_config(config, f"the {self.architecture} registration")
        return features_of(Deployment(facts, ChipFamily.HOST, DeviceKind.CPU))

    @property
    def registered_by_us(self) -> bool:
        return self.implementation_kind is Implementation.OURS

    def serves_on(self, device: DeviceKind) -> bool:
        """The matrix serves every feature of the architecture on this device."""
        return all(isinstance(verdict(f, device), Supported) for f in self.features)

    def describe(self) -> dict[str, object]:
        return {
            "architecture": self.architecture,
            "implementation_kind": self.implementation_kind.value,
            "implementation": self.implementation,
            "why": self.why,
            "features": [f.name for f in self.features],
            "serves_on": [d.value for d in DeviceKind if self.serves_on(d)],
        }


_VLLM_MODELS = "vllm.model_executor.models"
_DENSE = (
    "vLLM's model as written: its attention layers run on the plugin's paged attention "
    "backend and its norms, rotary embedding and activation on the plugin's custom ops; "
    "nothing in the architecture needs a class of our own"
)
_MLA_MOE = (
    "vLLM's model: its MLA layers run on the plugin's MLA backend (latent cache, absorbed "
    "decode) and its FusedMoE layers on the plugin's MoE method; the model class itself "
    "holds nothing device-specific"
)
_MOE = (
    "vLLM's model: paged attention on the plugin's backend, its FusedMoE layers on the "
    "plugin's MoE method; nothing in the architecture needs a class of our own"
)
_DRAFT = (
    "vLLM's draft model, built by vLLM's proposer; its layers run on the plugin's attention "
    "backends and ops like the target's"
)


def _vllm(architecture: str, module: str, why: str, **config: Any) -> Registration:
    path = module if module.startswith("vllm.") else f"{_VLLM_MODELS}.{module}"
    return Registration(architecture, Implementation.VLLM, f"{path}:{architecture}", why, config)


_MLA = {"kv_lora_rank": 512, "qk_rope_head_dim": 64}

REGISTRATIONS: tuple[Registration, ...] = (
    _vllm("LlamaForCausalLM", "llama", _DENSE, num_key_value_heads=8),
    _vllm("MistralForCausalLM", "mistral", _DENSE, sliding_window=None),
    _vllm("Qwen2ForCausalLM", "qwen2", _DENSE, sliding_window=32768, use_sliding_window=False),
    _vllm("Qwen3ForCausalLM", "qwen3", _DENSE, sliding_window=None, use_sliding_window=False),
    _vllm("DeepseekV2ForCausalLM", "deepseek_v2", _MLA_MOE, **_MLA, n_routed_experts=160),
    # vLLM's DeepSeek-V3 class lives in its deepseek_v2 module.
    _vllm("DeepseekV3ForCausalLM", "deepseek_v2", _MLA_MOE, **_MLA, n_routed_experts=256),
    _vllm("Qwen3MoeForCausalLM", "qwen3_moe", _MOE, num_experts=128),
    _vllm(
        "DeepseekV32ForCausalLM",
        "vllm.models.deepseek_v32",
        "vLLM's model with its lightning indexer: the plugin's sparse MLA backend takes "
        "over the indexer module (its keys unquantized in their own paged cache, its top-k "
        "and the sparse MLA over the selected latent rows on the device's sparse MLA ops) "
        "and the MoE layers run on the plugin's MoE method",
        **_MLA,
        n_routed_experts=256,
        index_topk=2048,
    ),
    _vllm(
        "Qwen3NextForCausalLM",
        "qwen3_next",
        "vLLM's model and its hybrid KV-cache manager (conv and recurrent state per "
        "request): the gated delta net layers run on the plugin's linear-attention ops, the "
        "full-attention layers on its paged backend, the MoE layers on its MoE method",
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        num_experts=512,
    ),
    _vllm(
        "Qwen3_5ForCausalLM",
        "qwen3_5",
        "vLLM's Qwen3.5 text model: Qwen3-Next's hybrid layout (its loader stacks the "
        "separately stored GDN input projections into the same layer), so the gated delta "
        "net layers run on the plugin's linear-attention ops and the full-attention layers "
        "(with their output gate) on its paged backend",
        layer_types=["linear_attention"] * 3 + ["full_attention"],
    ),
    _vllm(
        "Qwen3_5MoeForCausalLM",
        "qwen3_5",
        "vLLM's Qwen3.5-MoE text model: as Qwen3.5, with sparse MoE layers (a gated shared "
        "expert) on the plugin's MoE method",
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        num_experts=256,
    ),
    Registration(
        "KimiLinearForCausalLM",
        Implementation.OURS,
        None,
        "vLLM 0.33 gives an out-of-tree platform its NVIDIA Kimi-Linear class (fused-gate "
        "FLA KDA kernels, a CUTLASS GEMM + all-reduce, FlashMLA), so the plugin registers "
        "vLLM's reference one (its XPU path): the KDA layers on the plugin's linear-attention "
        "ops (a gate per key channel), the NoPE MLA layers on its MLA backend, the MoE on its "
        "MoE method",
        {
            "kv_lora_rank": 512, "qk_rope_head_dim": 64, "num_experts": 256,
            "num_hidden_layers": 4,
            "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4]},
        },
    ),
    Registration(
        "DeepseekV4ForCausalLM",
        Implementation.OURS,
        None,
        "vLLM 0.33 gives an out-of-tree platform its NVIDIA DeepSeek-V4 class (TileLang "
        "hyper-connections, DeepGEMM MegaMoE, FlashMLA, FlashInfer sparse attention) and its "
        "CPU class needs vllm._C's CPU kernels and an fp8 cache, so the plugin registers its "
        "own: the V4 layers each caching their attention inputs in paged blocks and "
        "recomputing the window, compressed rows and indexer top-k from them; norms, rope, "
        "the lightning indexer, the attention with its sinks and the routed experts on the "
        "device's ops, the rest torch on the device; bf16 on the NPU (emulated only)",
        {
            "head_dim": 512, "qk_rope_head_dim": 64, "num_key_value_heads": 1,
            "n_routed_experts": 256, "index_topk": 512, "sliding_window": 128,
        },
    ),
    _vllm(
        "GptOssForCausalLM",
        "gpt_oss",
        "vLLM's model: per-layer sliding windows and learned sinks go to the plugin's paged "
        "attention backend, the MoE (router bias, clamped SwiGLU) to its MoE method",
        layer_types=["sliding_attention", "full_attention"],
        sliding_window=128,
        num_local_experts=32,
    ),
    Registration(
        "EagleLlamaForCausalLM",
        Implementation.VLLM,
        f"{_VLLM_MODELS}.llama_eagle:EagleLlamaForCausalLM",
        _DRAFT,
        speculative_method="eagle",
    ),
    Registration(
        "Eagle3LlamaForCausalLM",
        Implementation.VLLM,
        f"{_VLLM_MODELS}.llama_eagle3:Eagle3LlamaForCausalLM",
        _DRAFT,
        speculative_method="eagle3",
    ),
    Registration(
        "DeepSeekMTPModel",
        Implementation.VLLM,
        f"{_VLLM_MODELS}.deepseek_mtp:DeepSeekMTP",
        _DRAFT + " (the target's MTP layers)",
        speculative_method="mtp",
    ),
)

_BY_ARCHITECTURE: Mapping[str, Registration] = {r.architecture: r for r in REGISTRATIONS}


def registration_for(architecture: str) -> Registration | None:
    """The table's row for the architecture; None when it has none."""
    return _BY_ARCHITECTURE.get(architecture)


def ours_only(table: tuple[Registration, ...] = REGISTRATIONS) -> tuple[Registration, ...]:
    """The rows the vLLM adapter registers with vLLM (our own implementations)."""
    return tuple(r for r in table if r.registered_by_us)


def unregistered_note(architecture: str) -> str:
    """What serves an architecture the table does not list."""
    return (
        f"{architecture} has no row in the plugin's registration table: vLLM's own model "
        "serves it if vLLM has one, with the plugin's backends; the support matrix decides "
        "from its features, but this plugin has not run this architecture"
    )
