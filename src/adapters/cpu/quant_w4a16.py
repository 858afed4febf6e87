"""The W4A16 port in plain torch on the host: the weight dequantized once, exactly."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ports.quant_w4a16 import Int4Weight, Int4WeightOps

_F32 = torch.float32


def dequantize_int4(values: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor | None,
                    group_size: int) -> torch.Tensor:
    """float32 w[o, i] = (q[o, i] - z[o, i // G]) * s[o, i // G]: the difference is an exact
    small integer, so each weight is one float32 product."""
    diff = values.to(_F32)
    if zero is not None:
        diff = diff - zero.to(_F32).repeat_interleave(group_size, dim=1)
    return diff * scale.to(_F32).repeat_interleave(group_size, dim=1)


class CpuInt4WeightOps(Int4WeightOps):
    """Holds the dequantized weight [n, k] in the activations' dtype (rounded once from
    float32); the matmul is torch's float GEMM. Any group size that divides k."""

    def int4_refusal(self, n: int, k: int, group_size: int) -> str | None:
        if group_size <= 0 or k % group_size:
            return f"a group size of {group_size} does not divide the {k} input features"
        return None

    def prepare_int4(
        self,
        values: torch.Tensor,
        scale: torch.Tensor,
        zero: torch.Tensor | None,
        group_size: int,
        dtype: torch.dtype,
    ) -> Int4Weight:
        n, k = values.shape
        weight = dequantize_int4(values, scale, zero, group_size).to(dtype).contiguous()
        return Int4Weight(weight, scale, None, n, k, group_size)

    def int4_matmul(
        self, x: torch.Tensor, weight: Int4Weight, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        return F.linear(x, weight.packed, bias)
