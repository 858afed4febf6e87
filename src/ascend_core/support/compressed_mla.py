"""What the plugin's DeepSeek-V4 class (compressed MLA, the host device) does not serve.

The matrix serves compressed MLA on the host through the plugin's own class: one device,
float weights, no drafts (its input cache takes the KV cache dtype the plan allows, auto,
bfloat16 or float16). Each deployment setting beyond that is refused here, before weights
load, with what to change.
"""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.errors import UnsupportedFeatureError
from ascend_core.quantization.methods import QuantMethod
from ascend_core.support.features import Feature
from ports.device import DeviceKind

_CLASS = "the plugin's DeepSeek-V4 class"


def compressed_mla_limit_errors(deployment: Deployment) -> tuple[UnsupportedFeatureError, ...]:
    """One error per setting the host's DeepSeek-V4 class does not serve (none elsewhere:
    the NPU refuses the feature outright)."""
    model, p = deployment.model, deployment.parallel
    if not model.compressed_attention or deployment.device_kind is not DeviceKind.CPU:
        return ()
    problems: list[tuple[str, str]] = []
    split = {"tensor_parallel_size": p.tp, "pipeline_parallel_size": p.pp,
             "decode_context_parallel_size": p.dcp, "prefill_context_parallel_size": p.pcp}
    for name, size in split.items():
        if size > 1:
            problems.append((
                f"{name}={size}: {_CLASS} runs on one device (its layers are plain torch "
                "modules, not split over ranks)",
                f"set {name} to 1",
            ))
    named = deployment.user_quantization
    if deployment.detected_quantization is not QuantMethod.NONE or (
        named and named != QuantMethod.NONE.value
    ):
        found = named or deployment.detected_quantization.value
        problems.append((
            f"quantized weights ({found}): {_CLASS} loads float weights only (DeepSeek's "
            "fp8/fp4 releases need their dequantization, which it does not have)",
            "serve a bf16 or float32 checkpoint",
        ))
    method = deployment.speculative.method
    if method:
        problems.append((
            f"speculative decoding ({method}): {_CLASS} loads no MTP layers and is not "
            "proven with any drafter",
            "serve without speculative_config",
        ))
    return tuple(
        UnsupportedFeatureError(
            f"{model.architecture} on the host device: {what}.", hint + ".",
            feature=Feature.COMPRESSED_MLA.name, device=DeviceKind.CPU.value,
        )
        for what, hint in problems
    )
