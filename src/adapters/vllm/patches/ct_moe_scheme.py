"""What the MoE-method patches of one target share: whether a wrapper is already ours
(several patches wrap CompressedTensorsMoEMethod.get_moe_method, so either may be
outermost) and the experts' compressed-tensors scheme as vLLM reads it."""

from __future__ import annotations

from typing import Any


def applied(function: Any, patch_id: str) -> bool:
    """Whether `function` or one it wraps (another patch of the same target) is ours."""
    while function is not None:
        if getattr(function, "__ascend_patch__", None) == patch_id:
            return True
        function = getattr(function, "__wrapped__", None)
    return False


def experts_scheme(quant_config: Any, layer: Any, layer_name: str) -> dict[str, Any] | None:
    """The experts' scheme dict (weights, input_activations, format), vLLM's own reading:
    one scheme for the three projections of expert 0; None where they are unquantized or
    mixed (vLLM raises its own error for mixed schemes)."""
    quant_config._add_fused_moe_to_target_scheme_map()
    names = (layer.ckpt_gate_proj_name, layer.ckpt_up_proj_name, layer.ckpt_down_proj_name)
    schemes = [quant_config.get_scheme_dict(layer, f"{layer_name}.0.{p}") for p in names]
    scheme = schemes[0]
    if scheme is None or any(s != scheme for s in schemes):
        return None
    return dict(scheme)
