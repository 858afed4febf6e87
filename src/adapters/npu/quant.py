"""The quantized-matmul port on torch_npu's quant ops, with the host adapter's semantics.

Facts from the op docs in the 2.14.0 wheel: npu_dynamic_quant takes float16/bfloat16
rows and returns int8 plus a float32 scale per row (scale = rowMax|x| / 127,
y = round(x / scale)); npu_quantize with div_mode=False computes x * scales +
zero_points (scales and zero_points of one dtype); npu_quant_matmul multiplies x1
[m, k] by x2 [k, n], adds an int32 bias before dequantizing, and takes a float32
scale for bfloat16 output or with pertoken_scale, else an int64 scale made by
npu_trans_quant_param (FP19, round_mode 0 truncates).
"""

from __future__ import annotations

from types import ModuleType

import torch

from ports.quant import QuantOps


class NpuQuantOps(QuantOps):
    """Weights as [k, n] int8 (ND; the fractal NZ layout is not used yet)."""

    def __init__(self, torch_npu: ModuleType) -> None:
        self._torch_npu = torch_npu

    def prepare_weight(self, weight: torch.Tensor) -> torch.Tensor:
        if weight.dtype != torch.int8 or weight.dim() != 2:
            raise ValueError(
                f"quantized weight must be int8 [n, k], not {weight.dtype} {tuple(weight.shape)}"
            )
        return weight.t().contiguous()

    def prepare_scale(self, scale: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        scale = scale.to(torch.float32).reshape(-1).contiguous()
        if out_dtype == torch.float16:
            packed: torch.Tensor = self._torch_npu.npu_trans_quant_param(scale, None)
            return packed
        return scale

    def quantize_per_token(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x_q, scale = self._torch_npu.npu_dynamic_quant(x, dst_type=torch.int8)
        return x_q, scale

    def quantize_static(
        self, x: torch.Tensor, inv_scale: torch.Tensor, offset: torch.Tensor
    ) -> torch.Tensor:
        # axis -1, div_mode False: x * inv_scale + offset, per tensor (scales of size 1).
        x_q: torch.Tensor = self._torch_npu.npu_quantize(
            x, inv_scale, offset, torch.qint8, -1, False
        )
        return x_q

    def quant_matmul(
        self,
        x_q: torch.Tensor,
        weight: torch.Tensor,
        scale: torch.Tensor,
        out_dtype: torch.dtype,
        pertoken_scale: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        y: torch.Tensor = self._torch_npu.npu_quant_matmul(
            x_q, weight, scale, pertoken_scale=pertoken_scale, bias=bias, output_dtype=out_dtype
        )
        return y
