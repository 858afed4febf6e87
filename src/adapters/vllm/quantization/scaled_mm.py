"""vLLM's int8 ScaledMM kernel interface (compressed-tensors W8A8) on the QuantOps port.

Serves int8 weights with a per-channel or per-tensor scale and symmetric int8
activations, dynamic per token (s = max|x| / 127, x_q = round(x / s)) or static per
tensor (x_q = saturate(round(x * (1 / input_scale)))); y = acc * weight_scale * s, or
acc * (input_scale * weight_scale), plus the float bias. Fused layers take the largest
shard input scale, as vLLM's own kernels do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
    Int8ScaledMMLinearKernel,
    Int8ScaledMMLinearLayerConfig,
)
from vllm.model_executor.layers.quantization.utils.w8a8_utils import convert_to_channelwise

from adapters.container import container
from adapters.torch.static_quant import static_activation_params

_F32 = torch.float32


class AscendInt8ScaledMMLinearKernel(Int8ScaledMMLinearKernel):
    """Registered under PlatformEnum.OOT by the `oot-int8-scaled-mm-kernel` patch; vLLM
    constructs one per layer, on the quant ops port resolved then."""

    def __init__(self, c: Int8ScaledMMLinearLayerConfig, layer_param_names: Sequence[str]) -> None:
        super().__init__(c, layer_param_names)
        self.quant = container().quant_ops()

    @classmethod
    def is_supported(cls, compute_capability: int | None = None) -> tuple[bool, str | None]:
        return True, None

    @classmethod
    def can_implement(cls, c: Int8ScaledMMLinearLayerConfig) -> tuple[bool, str | None]:
        if not c.input_symmetric:
            return False, (
                "serves symmetric int8 activations only; this checkpoint has an input "
                "zero point (asymmetric activations)"
            )
        return True, None

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        quant = self.quant
        w_name, ws_name, is_name, _, _ = self.layer_param_names
        weight = getattr(layer, w_name)
        scale = getattr(layer, ws_name).data
        widths = list(layer.logical_widths)
        if not self.config.is_channelwise:
            scale = convert_to_channelwise(scale, widths)
        scale = scale.to(_F32).reshape(-1)
        if self.config.is_static_input_scheme:
            input_scale = getattr(layer, is_name).data.to(_F32).max().reshape(1)
            layer.ascend_inv_scale, layer.ascend_offset = static_activation_params(
                input_scale, torch.zeros_like(input_scale), layer.params_dtype)
            scale = quant.prepare_scale(input_scale * scale, layer.params_dtype)
        layer.ascend_scale = scale
        weight.data = quant.prepare_weight(weight.data)
        layer.ascend_quant = quant

    def apply_weights(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        quant: Any = layer.ascend_quant
        rows = x.reshape(-1, x.shape[-1])
        weight = getattr(layer, self.layer_param_names[0])
        if self.config.is_static_input_scheme:
            x_q = quant.quantize_static(rows, layer.ascend_inv_scale, layer.ascend_offset)
            y = quant.quant_matmul(x_q, weight, layer.ascend_scale, x.dtype)
        else:
            x_q, per_token = quant.quantize_per_token(rows)
            y = quant.quant_matmul(x_q, weight, layer.ascend_scale, x.dtype,
                                   pertoken_scale=per_token)
        if bias is not None:
            y = y + bias
        return y.reshape(*x.shape[:-1], y.shape[-1])
