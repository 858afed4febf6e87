"""compressed-tensors fp8 MoE experts on our platform: the dequantize-at-load method."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from adapters.vllm.patches._symbols import holder_and_attr, resolve
from adapters.vllm.patches.ct_moe_scheme import applied, experts_scheme

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec


def use_fp8_dequant_moe_method(spec: PatchSpec) -> None:
    """CompressedTensorsMoEMethod.get_moe_method, wrapped: experts whose weights are fp8
    with a scale per output channel or per block, and whose activations are dynamic fp8 or
    not quantized (what the core's export reader calls CT_FP8_CHANNEL / CT_FP8_BLOCK), get
    ours, chosen before vLLM's fp8 MoE method looks for a backend; every other case as
    vLLM picks it; re-entrant."""
    original = resolve(spec.target)
    if applied(original, spec.id):
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
    scheme = experts_scheme(quant_config, layer, layer_name)
    if scheme is None:
        return None
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


def use_fp8_dequant_moe_method_for_fp8_config(spec: PatchSpec) -> None:
    """Fp8Config.get_quant_method, wrapped: the routed experts of an fp8-serialized
    checkpoint with weight_block_size (dynamic activations, which vLLM requires of block
    fp8) get ours, with the fp8 method's `weight_scale_inv` scales, chosen before vLLM's
    Fp8MoEMethod looks for a backend; skipped experts, per-tensor fp8 (the plan refuses it
    before load) and every other layer as vLLM picks them; re-entrant."""
    original = resolve(spec.target)
    if applied(original, spec.id):
        return

    @functools.wraps(original)
    def get_quant_method(self: Any, layer: Any, prefix: str) -> Any:
        block = _fp8_method_experts_block(self, layer, prefix)
        if block is None:
            return original(self, layer, prefix)
        from adapters.vllm.quantization.moe_fp8 import AscendFp8DequantMoeMethod

        return AscendFp8DequantMoeMethod(layer.moe_config, block, "weight_scale_inv")

    get_quant_method.__ascend_patch__ = spec.id  # type: ignore[attr-defined]
    holder, attr = holder_and_attr(spec.target)
    setattr(holder, attr, get_quant_method)


def _fp8_method_experts_block(quant_config: Any, layer: Any,
                              prefix: str) -> tuple[int, int] | None:
    """The [block_n, block_k] of routed experts that Fp8Config would give Fp8MoEMethod
    with block-quantized fp8 weights and dynamic activations; else None (vLLM's reading:
    the layer's prefix against ignored_layers, as Fp8Config.get_quant_method asks)."""
    from vllm.model_executor.layers.fused_moe import RoutedExperts
    from vllm.model_executor.layers.quantization import fp8

    if not isinstance(layer, RoutedExperts):
        return None
    block = quant_config.weight_block_size
    if (not quant_config.is_checkpoint_fp8_serialized or block is None
            or quant_config.activation_scheme != "dynamic"
            or getattr(quant_config, "store_dtype", None) == "mxfp4"):
        return None
    if fp8.is_layer_skipped(prefix=prefix, ignored_layers=quant_config.ignored_layers,
                            fused_mapping=quant_config.packed_modules_mapping,
                            match_mode=quant_config.ignored_layers_match_mode):
        return None
    bn, bk = block
    return (int(bn), int(bk))
