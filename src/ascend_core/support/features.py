"""The model and serving features the support matrix has a verdict on."""

from __future__ import annotations

import enum


class Feature(enum.Enum):
    """A feature a deployment may use; the value is how messages name it."""

    MLA = "multi-head latent attention (MLA)"
    SPARSE_MLA = "sparse MLA with an indexer (DSA, DeepSeek-V3.2)"
    COMPRESSED_MLA = "compressed MLA with an indexer (DeepSeek-V4)"
    MOE = "mixture of experts (fused MoE)"
    QUANTIZED_MOE = "ModelSlim-quantized MoE experts (W8A8_DYNAMIC)"
    EPLB = "expert load balancing with redundant experts (--enable-eplb)"
    SLIDING_WINDOW = "sliding-window attention"
    ATTENTION_SINKS = "attention sinks"
    HYBRID = "hybrid attention with mamba/linear-attention layers"
    GATED_DELTA_NET = (
        "hybrid attention with gated-delta-net linear attention (Qwen3-Next, Qwen3.5)"
    )
    KIMI_DELTA_ATTENTION = (
        "hybrid attention with Kimi delta attention (KDA) linear attention (Kimi-Linear)"
    )
    ENCODER_DECODER = "an encoder-decoder architecture"
    VISION = "a vision tower (image inputs)"
    VIDEO = "video inputs (through the vision tower)"
    AUDIO = "an audio tower"
    LORA = "LoRA adapters (--enable-lora)"
    LORA_QUANTIZED = "LoRA adapters on quantized layers"
    LORA_MOE = "LoRA adapters on a mixture-of-experts model"
    SLEEP_MODE = "sleep mode (--enable-sleep-mode)"
    PROFILER_TORCH = "vLLM's torch profiler (--profiler-config.profiler=torch)"
    PROFILER_CUDA = "vLLM's CUDA profiler (--profiler-config.profiler=cuda)"
    PROFILER_PROTON = "vLLM's Triton Proton profiler (--profiler-config.profiler=proton)"
    BATCH_INVARIANT = "batch-invariant attention (VLLM_ASCEND_TRAINING_CONSISTENCY=1)"
    SPEC_NGRAM = "speculative decoding: ngram"
    SPEC_SUFFIX = "speculative decoding: suffix"
    SPEC_EAGLE = "speculative decoding: eagle"
    SPEC_EAGLE3 = "speculative decoding: eagle3"
    SPEC_MTP = "speculative decoding: mtp"
    SPEC_MEDUSA = "speculative decoding: medusa"
    SPEC_DRAFT_MODEL = "speculative decoding: draft model"
    SPEC_OTHER = "speculative decoding: any other method"


# vLLM's speculative_config.method names -> the feature; methods ending in "_mtp"
# (deepseek_mtp, qwen3_next_mtp, ...) are MTP.
SPECULATIVE_METHODS: dict[str, Feature] = {
    "ngram": Feature.SPEC_NGRAM,
    "suffix": Feature.SPEC_SUFFIX,
    "eagle": Feature.SPEC_EAGLE,
    "eagle3": Feature.SPEC_EAGLE3,
    "mtp": Feature.SPEC_MTP,
    "medusa": Feature.SPEC_MEDUSA,
    "draft_model": Feature.SPEC_DRAFT_MODEL,
}


def speculative_feature(method: str) -> Feature:
    name = method.strip().lower()
    if name in SPECULATIVE_METHODS:
        return SPECULATIVE_METHODS[name]
    return Feature.SPEC_MTP if name.endswith("_mtp") else Feature.SPEC_OTHER
