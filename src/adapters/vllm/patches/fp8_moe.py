"""compressed-tensors fp8 MoE experts on our platform: the dequantize-at-load method."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from adapters.vllm.patches._symbols import holder_and_attr, resolve

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec


def _applied(function: Any, patch_id: str) -> bool:
    """Whether `function` or one it wraps is ours: ct-wna16-moe-int4 wraps the same target,
    so either may be outermost."""
    while function is not None:
        if getattr(function, "__ascend_patch__", None) == patch_id:
            return True
        function = getattr(function, "__wrapped__", None)
    return False


def use_fp8_dequant_moe_method(spec: PatchSpec) -> None:
    """CompressedTensorsMoEMethod.get_moe_method, wrapped: experts whose weights are fp8
    with a scale per output channel or per block, and whose activations are dynamic fp8 or
    not quantized (what the core's export reader calls CT_FP8_CHANNEL / CT_FP8_BLOCK), get
    ours, chosen before vLLM's fp8 MoE method looks for a backend; every other case as
    vLLM picks it; re-entrant."""
    original = resolve(spec.target)
    if _applied(original, spec.id):
        return

    @functools.wraps(original)
    def get_moe_method(quant_config: Any, layer: Any, layer_name: str) -> Any:
        from adapters.vllm.quantization.moe_fp8 import AscendFp8DequantMoeMethod

        weights = _fp8_experts(quant_config, layer, layer_name)
        if weights is None:
            return original(quant_config, layer, layer_name)
        block = None
        if str(getattr(weights.strategy, "value", weights.strategy)) == "block":
            bn, bk = weights.block_structure
            block = (int(bn), int(bk))
        return AscendFp8DequantMoeMethod(layer.moe_config, block)

    get_moe_method.__ascend_patch__ = spec.id  # type: ignore[attr-defined]
    holder, attr = holder_and_attr(spec.target)
    setattr(holder, attr, staticmethod(get_moe_method))


def _fp8_experts(quant_config: Any, layer: Any, layer_name: str) -> Any:
    """The experts' weight QuantizationArgs where they are fp8 per channel or per block with
    dynamic fp8 (or float) activations; else None. vLLM's own reading: one scheme for the
    three projections of expert 0."""
    quant_config._add_fused_moe_to_target_scheme_map()
    names = (layer.ckpt_gate_proj_name, layer.ckpt_up_proj_name, layer.ckpt_down_proj_name)
    schemes = [quant_config.get_scheme_dict(layer, f"{layer_name}.0.{p}") for p in names]
    scheme = schemes[0]
    if scheme is None or any(s != scheme for s in schemes):
        return None  # unquantized, or vLLM's own error for mixed schemes
    weights, inputs = scheme.get("weights"), scheme.get("input_activations")
    if weights is None:
        return None

    def value(x: Any) -> str:
        return str(getattr(x, "value", x))

    fp8 = (value(weights.type) == "float" and weights.num_bits == 8
           and value(weights.strategy) in ("channel", "block"))
    dynamic = inputs is None or (bool(inputs.dynamic) and value(inputs.type) == "float")
    if value(weights.strategy) == "block" and not weights.block_structure:
        return None
    return weights if fp8 and dynamic else None
