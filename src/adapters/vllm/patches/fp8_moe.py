"""compressed-tensors fp8 MoE experts on our platform: the dequantize-at-load method."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from adapters.vllm.patches._symbols import holder_and_attr, resolve

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec


def use_fp8_dequant_moe_method(spec: PatchSpec) -> None:
    """CompressedTensorsMoEMethod.get_moe_method, wrapped: where vLLM picks its fp8 MoE
    method for experts with per-channel or block weight scales and dynamic activations,
    ours instead (the rest as vLLM picks it); re-entrant."""
    original = resolve(spec.target)
    if getattr(original, "__ascend_patch__", None) == spec.id:
        return

    @functools.wraps(original)
    def get_moe_method(quant_config: Any, layer: Any, layer_name: str) -> Any:
        from compressed_tensors.quantization import QuantizationStrategy
        from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe.compressed_tensors_moe_w8a8_fp8 import (  # noqa: E501
            CompressedTensorsW8A8Fp8MoEMethod,
        )

        from adapters.vllm.quantization.moe_fp8 import AscendFp8DequantMoeMethod

        method = original(quant_config, layer, layer_name)
        if type(method) is not CompressedTensorsW8A8Fp8MoEMethod or method.static_input_scales:
            return method
        strategy = method.weight_quant.strategy
        if strategy == QuantizationStrategy.CHANNEL:
            return AscendFp8DequantMoeMethod(layer.moe_config, None)
        if strategy == QuantizationStrategy.BLOCK:
            bn, bk = method.weight_block_size
            return AscendFp8DequantMoeMethod(layer.moe_config, (int(bn), int(bk)))
        return method  # per tensor: refused before load by the plan

    get_moe_method.__ascend_patch__ = spec.id  # type: ignore[attr-defined]
    holder, attr = holder_and_attr(spec.target)
    setattr(holder, attr, staticmethod(get_moe_method))
