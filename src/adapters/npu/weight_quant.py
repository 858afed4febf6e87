"""The weight-only quantized-matmul port on torch_npu's npu_weight_quant_batchmatmul.

Facts from the op docs in the 2.14.0 wheel (Atlas A2/A3): x [m, k] float16/bfloat16,
weight int8 [k, n] (ND), antiquant_scale and antiquant_offset per channel (n,) in x's
dtype, computing (weight + antiquant_offset) * antiquant_scale; bias (n,) float32 for
bfloat16 x, float16 for float16 x; the output in x's dtype. float32 activations are not
taken.
"""

from __future__ import annotations

from types import ModuleType

import torch

from adapters.torch.weight_only import channel_vectors
from ports.weight_quant import WeightOnlyTensors, WeightQuantOps


class NpuWeightQuantOps(WeightQuantOps):
    """Weights as [k, n] int8 (ND; the fractal NZ layout is not used yet)."""

    def __init__(self, torch_npu: ModuleType) -> None:
        self._torch_npu = torch_npu

    def prepare_weight_only(
        self, weight: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor,
        dtype: torch.dtype,
    ) -> WeightOnlyTensors:
        # Each call casts the float32-held [n] vectors to x's dtype, exactly.
        return (weight.t().contiguous(), *channel_vectors(weight, scale, offset, dtype))

    def weight_quant_matmul(
        self, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
        offset: torch.Tensor, bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if bias is not None:
            bias = bias.to(torch.float32 if x.dtype == torch.bfloat16 else x.dtype)
        y: torch.Tensor = self._torch_npu.npu_weight_quant_batchmatmul(
            x, weight, scale.to(x.dtype), offset.to(x.dtype), bias=bias
        )
        return y
