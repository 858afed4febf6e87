"""compressed-tensors W4A16 MoE experts on our platform: the int4 experts method."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from adapters.vllm.patches._symbols import holder_and_attr, resolve
from adapters.vllm.patches.ct_moe_scheme import applied, experts_scheme

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec

_PACK_QUANTIZED = "pack-quantized"


def use_int4_moe_method(spec: PatchSpec) -> None:
    """CompressedTensorsMoEMethod.get_moe_method, wrapped: where vLLM would build its WNA16
    MoE method for 4-bit pack-quantized experts (group or channel scales, static, no
    activation quantization, not activation-ordered), ours instead, chosen before vLLM's
    constructor selects (and fails to find) a backend; every other case as vLLM picks it;
    re-entrant."""
    original = resolve(spec.target)
    if applied(original, spec.id):
        return

    @functools.wraps(original)
    def get_moe_method(quant_config: Any, layer: Any, layer_name: str) -> Any:
        from adapters.vllm.quantization.moe_w4a16 import AscendW4A16MoeMethod

        weights = _int4_experts(quant_config, layer, layer_name)
        if weights is None:
            return original(quant_config, layer, layer_name)
        group = None if weights.strategy == "channel" else int(weights.group_size)
        return AscendW4A16MoeMethod(layer.moe_config, group, bool(weights.symmetric))

    get_moe_method.__ascend_patch__ = spec.id  # type: ignore[attr-defined]
    holder, attr = holder_and_attr(spec.target)
    setattr(holder, attr, staticmethod(get_moe_method))


def _int4_experts(quant_config: Any, layer: Any, layer_name: str) -> Any:
    """The experts' weight QuantizationArgs where they are plain 4-bit pack-quantized
    W4A16 (what the core's export reader calls CT_W4A16); else None. vLLM's own reading:
    one scheme for the three projections of expert 0."""
    scheme = experts_scheme(quant_config, layer, layer_name)
    if scheme is None:
        return None
    weights, inputs = scheme.get("weights"), scheme.get("input_activations")
    if weights is None or not quant_config._is_wNa16_group_channel(weights, inputs):
        return None
    actorder = getattr(weights.actorder, "value", weights.actorder)
    plain = (weights.num_bits == 4 and str(getattr(weights.type, "value", weights.type))
             == "int" and actorder != "group"
             and scheme.get("format") in (None, _PACK_QUANTIZED))
    return weights if plain else None
