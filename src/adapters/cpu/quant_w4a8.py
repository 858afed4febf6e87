"""The W4A8_DYNAMIC linear port in plain torch on the host: exact int8 x int4 -> int32 math
(the int4 values held one per int8), as the W8A8_DYNAMIC linear computes it."""

from __future__ import annotations

import torch

from adapters.cpu.quant import CpuQuantOps, int8_gemm
from adapters.torch.expert_weights import check_int4_linear, check_int4_range
from ports.quant_w4a8 import W4A8LinearOps, W4A8Weight

_F32 = torch.float32


class CpuW4A8LinearOps(W4A8LinearOps):
    """Holds the int4 values as int8 [n, k]; torch's int8 GEMM gives the exact products,
    so scale_bias (the NPU kernel's correction) is held but not read."""

    def __init__(self) -> None:
        self._quant = CpuQuantOps()

    def w4a8_refusal(self, n: int, k: int) -> str | None:
        return None

    def prepare_w4a8(
        self, values: torch.Tensor, scale: torch.Tensor, scale_bias: torch.Tensor
    ) -> W4A8Weight:
        check_int4_linear(values)
        check_int4_range("values", values)
        n, k = values.shape
        return W4A8Weight(values.contiguous(), scale.to(_F32).reshape(-1).contiguous(),
                          scale_bias.to(_F32).reshape(-1).contiguous(), n, k)

    def w4a8_matmul(
        self, x: torch.Tensor, weight: W4A8Weight, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        x_q, token_scale = self._quant.quantize_per_token(x)
        y = (int8_gemm(x_q, weight.weight).to(_F32) * weight.scale
             * token_scale.unsqueeze(-1)).to(x.dtype)
        return y if bias is None else y + bias
