"""The quantized-matmul port in plain torch on the host: exact int8 x int8 -> int32 math."""

from __future__ import annotations

import torch

from ports.quant import QuantOps

_F32 = torch.float32
_FP19_MASK = -(1 << 13)
_MIN_INT_MM_K = 8  # keeps sign, exponent and the top 10 mantissa bits


def fp19(scale: torch.Tensor) -> torch.Tensor:
    """float32 values with the low 13 mantissa bits cleared (truncation to FP19)."""
    bits = scale.to(_F32).contiguous().view(torch.int32)
    return (bits & _FP19_MASK).view(_F32)


def saturate_int8(values: torch.Tensor) -> torch.Tensor:
    return values.clamp(-128, 127).to(torch.int8)


class CpuQuantOps(QuantOps):
    """Weights stay [n, k] int8; the product is torch's int8 GEMM with int32 results."""

    def prepare_weight(self, weight: torch.Tensor) -> torch.Tensor:
        if weight.dtype != torch.int8 or weight.dim() != 2:
            raise ValueError(f"quantized weight must be int8 [n, k], not {weight.dtype} "
                             f"{tuple(weight.shape)}")
        return weight.contiguous()

    def prepare_scale(self, scale: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        scale = scale.to(_F32).reshape(-1)
        return fp19(scale) if out_dtype == torch.float16 else scale.contiguous()

    def quantize_per_token(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xf = x.to(_F32)
        scale = xf.abs().amax(dim=-1) / 127.0
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        x_q = saturate_int8(torch.round(xf / safe.unsqueeze(-1)))
        return torch.where(scale.unsqueeze(-1) > 0, x_q, torch.zeros_like(x_q)), scale

    def quantize_static(
        self, x: torch.Tensor, inv_scale: torch.Tensor, offset: torch.Tensor
    ) -> torch.Tensor:
        xf = x.to(_F32)
        return saturate_int8(torch.round(xf * inv_scale.to(_F32) + offset.to(_F32)))

    def quant_matmul(
        self,
        x_q: torch.Tensor,
        weight: torch.Tensor,
        scale: torch.Tensor,
        out_dtype: torch.dtype,
        pertoken_scale: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        acc = int8_gemm(x_q, weight)
        if bias is not None:
            acc = acc + bias.to(torch.int32)
        y = acc.to(_F32) * scale
        if pertoken_scale is not None:
            y = y * pertoken_scale.to(_F32).unsqueeze(-1)
        return y.to(out_dtype)


def int8_gemm(x_q: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x_q [T, k] @ weight [n, k]^T, exact in int32.

    torch 2.13's CPU int8 GEMM returns garbage for k < 2 (measured), so tiny k goes
    through an int32 matmul (exact, slower).
    """
    if x_q.shape[0] == 0:
        return torch.zeros(0, weight.shape[0], dtype=torch.int32)
    if x_q.shape[1] < _MIN_INT_MM_K:
        return x_q.to(torch.int32) @ weight.to(torch.int32).t()
    return torch._int_mm(x_q.contiguous(), weight.t())
