"""The weight-only quantized-matmul port in plain torch on the host (the reference)."""

from __future__ import annotations

import torch

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
        if weight.dtype != torch.int8 or weight.dim() != 2:
            raise ValueError(f"weight-only weight must be int8 [n, k], not {weight.dtype} "
                             f"{tuple(weight.shape)}")
        n = weight.shape[0]
        # Rounded to the activations' dtype, as the NPU op takes them; held in float32.
        return (weight.contiguous(), scale.to(_F32).reshape(n).to(dtype).to(_F32),
                offset.to(_F32).reshape(n).to(dtype).to(_F32))

    def weight_quant_matmul(
        self, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
        offset: torch.Tensor, bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        deq = (weight.to(_F32) + offset[:, None]) * scale[:, None]
        y = x.to(_F32) @ deq.to(x.dtype).to(_F32).t()
        if bias is not None:  # float16 activations take a float16 bias on the NPU
            y = y + (bias.to(torch.float16) if x.dtype == torch.float16 else bias).to(_F32)
        return y.to(x.dtype)
