"""The weight-only quantized-matmul port in plain torch on the host (the reference)."""

from __future__ import annotations

import torch

from adapters.torch.weight_only import channel_vectors
from ports.weight_quant import WeightOnlyTensors, WeightQuantOps

_F32 = torch.float32


class CpuWeightQuantOps(WeightQuantOps):
    """Weights stay int8 [n, k]; each call dequantizes them in float32, then to x's dtype.

    Scale and offset are rounded to the activations' dtype at prepare (exact for float32
    models; the NPU op takes them in x's dtype), and held in float32.
    """

    def prepare_weight_only(
        self, weight: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor,
        dtype: torch.dtype,
    ) -> WeightOnlyTensors:
        return (weight.contiguous(), *channel_vectors(weight, scale, offset, dtype))

    def weight_quant_matmul(
        self, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
        offset: torch.Tensor, bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        deq = (weight.to(_F32) + offset[:, None]) * scale[:, None]
        y = x.to(_F32) @ deq.to(x.dtype).to(_F32).t()
        if bias is not None:  # float16 activations take a float16 bias on the NPU
            y = y + (bias.to(torch.float16) if x.dtype == torch.float16 else bias).to(_F32)
        return y.to(x.dtype)
