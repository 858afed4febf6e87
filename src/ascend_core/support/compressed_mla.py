"""What the plugin's DeepSeek-V4 class (compressed MLA) does not serve, on either device.

The matrix serves compressed MLA through the plugin's own class: one device, float weights,
no drafts (its input cache takes the KV cache dtype the plan allows, auto, bfloat16 or
float16). On the NPU also: bfloat16 (the routed experts' combine, npu_moe_token_unpermute,
takes bfloat16 only) and an index_topk npu_lightning_indexer's sparse_count takes. Each
deployment setting beyond that is refused here, before weights load, with what to change.
"""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.errors import UnsupportedFeatureError
from ascend_core.op_limits import SPARSE_COUNTS
from ascend_core.quantization.methods import QuantMethod
from ascend_core.support.features import Feature
from ports.device import DeviceKind

_CLASS = "the plugin's DeepSeek-V4 class"


def compressed_mla_limit_errors(deployment: Deployment) -> tuple[UnsupportedFeatureError, ...]:
    """One error per setting the DeepSeek-V4 class does not serve on the deployment's device."""
    model, p = deployment.model, deployment.parallel
    device = deployment.device_kind
    if not model.compressed_attention or device not in (DeviceKind.CPU, DeviceKind.NPU):
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
    if device is DeviceKind.NPU:
        problems.extend(_npu_problems(deployment))
    where = "the host device" if device is DeviceKind.CPU else "an NPU"
    return tuple(
        UnsupportedFeatureError(
            f"{model.architecture} on {where}: {what}.", hint + ".",
            feature=Feature.COMPRESSED_MLA.name, device=device.value,
        )
        for what, hint in problems
    )


def _npu_problems(deployment: Deployment) -> list[tuple[str, str]]:
    model = deployment.model
    problems = []
    if model.dtype != "bfloat16":
        problems.append((
            f"dtype {model.dtype}: {_CLASS} runs its routed experts through the NPU MoE ops, "
            "whose combine (npu_moe_token_unpermute) takes bfloat16 only",
            "serve with --dtype bfloat16",
        ))
    if model.index_topk is not None and model.index_topk not in SPARSE_COUNTS:
        problems.append((
            f"index_topk {model.index_topk}: npu_lightning_indexer's sparse_count takes "
            "1-2048, 3072, 4096, 5120, 6144, 7168 or 8192",
            "serve it on the host device (VLLM_ASCEND_DEVICE=cpu)",
        ))
    return problems
