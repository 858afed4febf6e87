"""Which features a deployment uses, and the matrix's refusals for its device."""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.errors import UnsupportedFeatureError
from ascend_core.model_facts import (
    GATED_DELTA_NET_ARCHITECTURES,
    KIMI_DELTA_ATTENTION_ARCHITECTURES,
)
from ascend_core.moe.eplb_request import eplb_requested
from ascend_core.quantization.methods import QuantMethod
from ascend_core.support.features import Feature, speculative_feature
from ascend_core.support.matrix import Refused, verdict

_DEVICE_NAMES = {"cpu": "the host device", "npu": "an Ascend NPU"}


def _quantized(deployment: Deployment) -> bool:
    named = deployment.user_quantization
    return deployment.detected_quantization is not QuantMethod.NONE or bool(
        named and named != QuantMethod.NONE.value
    )


def features_of(deployment: Deployment) -> tuple[Feature, ...]:
    """Every feature of the matrix that this deployment uses, in the enum's order."""
    m = deployment.model
    gdn = m.architecture in GATED_DELTA_NET_ARCHITECTURES
    kda = m.architecture in KIMI_DELTA_ATTENTION_ARCHITECTURES
    used = {
        Feature.MLA: m.use_mla and not m.use_sparse and not m.compressed_attention,
        Feature.SPARSE_MLA: m.use_sparse and not m.compressed_attention,
        Feature.COMPRESSED_MLA: m.compressed_attention,
        Feature.MOE: m.is_moe,
        # A ModelSlim export of a MoE model (its experts W8A8_DYNAMIC or FLOAT; which, the
        # quantization config reads from the description per layer).
        Feature.QUANTIZED_MOE: m.is_moe and deployment.detected_quantization is QuantMethod.ASCEND,
        # vLLM's EPLB, or the reference's switch for it (the plan maps one onto the other).
        Feature.EPLB: m.is_moe and eplb_requested(deployment),
        Feature.SLIDING_WINDOW: m.sliding_window,
        Feature.ATTENTION_SINKS: m.attention_sinks,
        Feature.HYBRID: m.hybrid and not gdn and not kda,
        Feature.GATED_DELTA_NET: m.hybrid and gdn,
        Feature.KIMI_DELTA_ATTENTION: m.hybrid and kda,
        Feature.ENCODER_DECODER: m.encoder_decoder,
        # The vision tower runs while images or videos are taken; video inputs while
        # videos are; the audio tower while audio is (--limit-mm-per-prompt, 0 = none).
        Feature.VISION: m.vision and not {"image", "video"} <= deployment.mm_off,
        Feature.VIDEO: m.video and "video" not in deployment.mm_off,
        Feature.AUDIO: m.audio and "audio" not in deployment.mm_off,
        Feature.LORA: deployment.lora,
        Feature.LORA_QUANTIZED: deployment.lora and _quantized(deployment),
        Feature.LORA_MOE: deployment.lora and m.is_moe,
        Feature.SLEEP_MODE: deployment.cache.enable_sleep_mode,
        Feature.BATCH_INVARIANT: deployment.training_consistency,
        Feature.PROFILER_TORCH: deployment.profiler.profiler == "torch",
        Feature.PROFILER_CUDA: deployment.profiler.profiler == "cuda",
        Feature.PROFILER_PROTON: deployment.profiler.profiler == "proton",
    }
    method = deployment.speculative.method
    found = [f for f, on in used.items() if on]
    if method:
        found.append(speculative_feature(method))
    order = list(Feature)
    return tuple(sorted(found, key=order.index))


def refusals(deployment: Deployment) -> tuple[UnsupportedFeatureError, ...]:
    """One typed error per feature the serving device does not serve."""
    device = deployment.device_kind
    where = _DEVICE_NAMES.get(device.value, device.value)
    out = []
    for feature in features_of(deployment):
        v = verdict(feature, device)
        if isinstance(v, Refused):
            out.append(
                UnsupportedFeatureError(
                    f"{deployment.model.architecture} uses {feature.value}, which this build "
                    f"of the Ascend plugin does not serve on {where}: {v.reason}.",
                    f"{v.instead}.",
                    feature=feature.name,
                    device=device.value,
                )
            )
    return tuple(out)
