"""compressed-tensors W4A16 MoE experts on an NPU: what its int4 grouped matmul cannot
take, known from the plan's settings alone (sizes and group counts are checked as the
layer is built, when vLLM knows each rank's slice; a float32 model is refused on an NPU
by the attention rule already)."""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.errors import QuantizationError
from ascend_core.quantization.export_layers import LayerKind, QuantFormat
from ports.device import DeviceKind


def w4a16_expert_refusals(deployment: Deployment) -> tuple[QuantizationError, ...]:
    """On an NPU: W4A16 experts with expert parallelism over more than one rank (the NPU's
    MC2/all-to-all exchange carries tokens to float or W8A8_DYNAMIC experts); the host
    serves it (its experts are float layers)."""
    if deployment.device_kind is not DeviceKind.NPU:
        return ()
    group = next((g for g in deployment.quantized_layers if g.format is QuantFormat.CT_W4A16
                  and g.kind is LayerKind.EXPERTS), None)
    parallel = deployment.parallel
    if group is None or not (parallel.expert_parallel and parallel.tp * parallel.dp > 1):
        return ()
    return (QuantizationError(
        f"Layer {group.first}: {group.says}, {group.format.value}, which this build serves "
        "for MoE experts on an Ascend NPU, but not with expert parallelism: the NPU's "
        "expert-parallel exchange (MC2, all-to-all) carries tokens to float or W8A8_DYNAMIC "
        "experts, not to W4A16 ones.",
        "Serve without --enable-expert-parallel (the experts are then split by tensor "
        "parallelism), or keep the experts unquantized (llm-compressor's ignore list, e.g. "
        "\"re:.*mlp.experts.*\").",
    ),)
