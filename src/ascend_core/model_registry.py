"""Model registration as data: architecture -> whose model class serves it, and why.

The vLLM adapter registers the rows of our own implementations with vLLM's `ModelRegistry`
(`module:Class`, imported lazily); the rows of vLLM's own models only say which of vLLM's
classes serves and what the plugin supplies under it. The doctor prints the row for the
model at hand; a test keeps this table and the support matrix in agreement.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

from attrs import field, frozen

from ascend_core.support.features import Feature
from ascend_core.support.matrix import Supported, verdict
from ports.device import DeviceKind


class Implementation(enum.Enum):
    """Whose model class vLLM instantiates for the architecture."""

    OURS = "ours"
    VLLM = "vLLM's own"


def _class_path(_instance: object, _attribute: object, value: str) -> None:
    module, _, cls = value.partition(":")
    if not module or not cls or ":" in cls:
        raise ValueError(f"implementation {value!r} is not `package.module:Class`")


def _features(values: Iterable[Feature]) -> tuple[Feature, ...]:
    return tuple(values)


@frozen
class Registration:
    """One architecture (hf_config.architectures[0]) and the model class that serves it.

    implementation: `package.module:Class`: ours (registered with vLLM) or vLLM's own (where
    vLLM's registry points; a test checks it against the installed vLLM).
    features: the support matrix's model features the architecture uses in its published
    configs; the matrix's verdicts on them say on which device it serves.
    """

    architecture: str
    implementation_kind: Implementation
    implementation: str = field(validator=_class_path)
    why: str
    features: tuple[Feature, ...] = field(default=(), converter=_features)

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


def _vllm(architecture: str, module: str, why: str, *features: Feature) -> Registration:
    path = module if module.startswith("vllm.") else f"{_VLLM_MODELS}.{module}"
    return Registration(architecture, Implementation.VLLM, f"{path}:{architecture}", why, features)


REGISTRATIONS: tuple[Registration, ...] = (
    _vllm("LlamaForCausalLM", "llama", _DENSE),
    _vllm("MistralForCausalLM", "mistral", _DENSE),
    _vllm("Qwen2ForCausalLM", "qwen2", _DENSE),
    _vllm("Qwen3ForCausalLM", "qwen3", _DENSE),
    _vllm("DeepseekV2ForCausalLM", "deepseek_v2", _MLA_MOE, Feature.MLA, Feature.MOE),
    # vLLM's DeepSeek-V3 class lives in its deepseek_v2 module.
    _vllm("DeepseekV3ForCausalLM", "deepseek_v2", _MLA_MOE, Feature.MLA, Feature.MOE),
    _vllm("Qwen3MoeForCausalLM", "qwen3_moe", _MOE, Feature.MOE),
    _vllm(
        "DeepseekV32ForCausalLM",
        "vllm.models.deepseek_v32",
        "vLLM's model with its lightning indexer: the indexer's key cache and top-k "
        "selection, and sparse MLA over the selected latent rows, run on the plugin's sparse "
        "MLA backend and the MoE layers on the plugin's MoE method; vLLM's model code is "
        "device-neutral, only the backends are ours",
        Feature.SPARSE_MLA,
        Feature.MOE,
    ),
    _vllm(
        "Qwen3NextForCausalLM",
        "qwen3_next",
        "vLLM's model and its hybrid KV-cache manager (conv and recurrent state per "
        "request): the gated delta net layers run on the plugin's linear-attention ops, the "
        "full-attention layers on its paged backend, the MoE layers on its MoE method",
        Feature.HYBRID,
        Feature.MOE,
    ),
    _vllm(
        "GptOssForCausalLM",
        "gpt_oss",
        "vLLM's model: per-layer sliding windows and learned sinks go to the plugin's paged "
        "attention backend, the MoE (router bias, clamped SwiGLU) to its MoE method",
        Feature.SLIDING_WINDOW,
        Feature.ATTENTION_SINKS,
        Feature.MOE,
    ),
    _vllm("EagleLlamaForCausalLM", "llama_eagle", _DRAFT, Feature.SPEC_EAGLE),
    _vllm("Eagle3LlamaForCausalLM", "llama_eagle3", _DRAFT, Feature.SPEC_EAGLE3),
    Registration(
        "DeepSeekMTPModel",
        Implementation.VLLM,
        f"{_VLLM_MODELS}.deepseek_mtp:DeepSeekMTP",
        _DRAFT + " (the target's MTP layers)",
        (Feature.SPEC_MTP,),
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
