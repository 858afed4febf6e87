"""Step: settle the quantization method from the user's choice and the model files."""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.errors import QuantizationError
from ascend_core.plan import fields
from ascend_core.plan.result import Draft
from ascend_core.quantization import SELECTABLE, UNSUPPORTED, QuantMethod
from ascend_core.quantization.export_layers import LayerKind, QuantFormat
from ascend_core.quantization.fp8 import block_shape_problem, fp8_serving
from ascend_core.quantization.methods import UNSUPPORTED_HINT, selectable_names
from ascend_core.quantization.w4a8 import ROW_SLICES, w4a8_split_problem
from ascend_core.quantization.w4a16_experts import w4a16_expert_refusals
from ascend_core.suggest import did_you_mean
from ascend_core.support.quant_matrix import device_name, quant_refusals


def resolve_quantization(deployment: Deployment, draft: Draft) -> Draft:
    """The user's choice wins over the files; a disagreement is a warning, never silent."""
    user = (deployment.user_quantization or "").strip()
    files_say = deployment.detected_quantization
    if not user:
        if files_say is QuantMethod.NONE:
            return draft.decide(quantization=QuantMethod.NONE)
        return draft.change(
            fields.QUANTIZATION,
            deployment.user_quantization,
            files_say,
            f"unset; the model files describe {files_say.value} quantization",
        ).decide(quantization=files_say)
    chosen = _selectable(user)
    if chosen is None:
        return draft.fail(_refusal(user)).decide(quantization=files_say)
    if chosen is not files_say:
        said = (
            "no quantization"
            if files_say is QuantMethod.NONE
            else f"{files_say.value} quantization"
        )
        draft = draft.warn(
            f"model_config.quantization={user!r} (--quantization) differs from the model "
            f"files, which describe {said}; using {chosen.value} as asked."
        )
    return draft.decide(quantization=chosen)


def _selectable(name: str) -> QuantMethod | None:
    label = name.lower()
    return next((m for m in SELECTABLE if m.value == label), None)


def _refusal(name: str) -> QuantizationError:
    label = name.lower()
    if label in UNSUPPORTED:
        return QuantizationError(
            f"model_config.quantization={name!r} (--quantization): vLLM's {label} kernels "
            "exist only for CUDA/ROCm, not for Ascend.",
            UNSUPPORTED_HINT,
        )
    return QuantizationError(
        f"model_config.quantization={name!r} (--quantization) is not a method this plugin serves.",
        f"Use one of {', '.join(selectable_names())}, or leave it unset to detect it from "
        f"the model files.{did_you_mean(label, selectable_names())}",
    )


_FP8_SERVED = frozenset(
    {QuantFormat.CT_FP8_CHANNEL, QuantFormat.CT_FP8_BLOCK, QuantFormat.FP8_BLOCK}
)


def check_quantized_layers(deployment: Deployment, draft: Draft) -> Draft:
    """Refuse, before any weight loads, every (format, layer kind) of the export that the
    quantization support table does not serve on this device, naming its first layer;
    and block-quantized layers whose blocks do not fit a rank's slice. An fp8 export
    that is served gets the chip's fp8 path, with its reason."""
    for error in quant_refusals(deployment.quantized_layers, deployment.device_kind):
        draft = draft.fail(error)
    tp = deployment.parallel.tp
    for group in deployment.quantized_layers:
        if (group.format, group.kind) == (QuantFormat.MODELSLIM_W4A8_DYNAMIC, LayerKind.LINEAR):
            problem = w4a8_split_problem(group.projections, tp, deployment.device_kind)
            if problem is not None:
                draft = draft.fail(QuantizationError(
                    f"Layer {group.first} and the other linear layers: {group.says}, "
                    f"{group.format.value}, which does not fit this model split over {tp} "
                    f"rank(s) on {device_name(deployment.device_kind)}: {problem}.",
                    f"Serve with a tensor-parallel size dividing {ROW_SLICES} that keeps "
                    "each rank's slices even (--tensor-parallel-size 1 if the sizes allow), "
                    "or re-export the linear layers with ModelSlim as W8A8_DYNAMIC.",
                ))
        if group.block is None or group.kind not in (LayerKind.LINEAR, LayerKind.EXPERTS):
            continue
        problem = block_shape_problem(group.projections, group.block, tp)
        if problem is not None:
            others = "linear layers" if group.kind is LayerKind.LINEAR else "MoE experts"
            draft = draft.fail(QuantizationError(
                f"Layer {group.first} and the other {others}: {group.says}, "
                f"{group.format.value}, with [{group.block[0]}, {group.block[1]}] weight "
                f"blocks, which do not fit this model split over {tp} rank(s) on "
                f"{device_name(deployment.device_kind)}: {problem}; each "
                "block's scale would land on the wrong rows.",
                "Serve with a tensor-parallel size that keeps every slice a whole number "
                "of blocks (--tensor-parallel-size 1 if the sizes allow), or re-quantize "
                "with a block shape that divides the layers' sizes (llm-compressor's "
                "FP8_BLOCK with a smaller block_structure), or use FP8_DYNAMIC (a scale per "
                "output channel, any size).",
            ))
    for error in w4a16_expert_refusals(deployment):
        draft = draft.fail(error)
    if any(g.format in _FP8_SERVED for g in deployment.quantized_layers):
        draft = draft.decide(fp8=fp8_serving(deployment.chip_family, deployment.device_kind))
    return draft
