"""Weight-only quantized matmul: float activations times int8 weights dequantized per
output channel (ModelSlim W8A16).

Every device adapter computes the same values; the host adapter's is the reference.
T tokens, k input features, n output features. The offset is additive, as the NPU op
takes it: w_deq[n, k] = (weight[n, k] + offset[n]) * scale[n] in float32, rounded to the
activations' dtype; y = x @ w_deq^T summed in float32, plus bias (rounded to float16 first
for float16 activations, as the NPU op takes it), rounded once to the activations' dtype.
(ModelSlim's weight_offset is subtracted: the caller negates it.)
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# A layer's (int8 weight, scale, additive offset), in the device's layout.
WeightOnlyTensors = tuple["torch.Tensor", "torch.Tensor", "torch.Tensor"]


class WeightQuantOps(abc.ABC):
    """The weight-only quantized-linear role of a device."""

    @abc.abstractmethod
    def prepare_weight_only(
        self, weight: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor,
        dtype: torch.dtype,
    ) -> WeightOnlyTensors:
        """From int8 weight [n, k], float scale [n] and additive float offset [n]: the
        tensors weight_quant_matmul reads for activations of `dtype`; the scale and offset
        values are rounded to `dtype` (the NPU op takes them in the activations' dtype)."""

    @abc.abstractmethod
    def weight_quant_matmul(
        self, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
        offset: torch.Tensor, bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """y [T, n] = x [T, k] @ ((weight + offset) * scale)^T + bias, as x's dtype;
        weight, scale and offset as prepare_weight_only returned them."""
