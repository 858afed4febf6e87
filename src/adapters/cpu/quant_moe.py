"""The quantized grouped MLP in plain torch on the host: exact int8 x int8 (W8A8_DYNAMIC) and
int8 x int4 (W4A8_DYNAMIC: the int4 values held in int8) -> int32 math.

Activations are quantized per token for all rows at once; the int8 GEMMs run once per
expert that received rows (torch's int8 GEMM has no grouped form), never per token.
"""

from __future__ import annotations

import torch

from adapters.cpu.quant import CpuQuantOps, int8_gemm
from adapters.torch.expert_weights import check_int4_range, check_int8_experts
from ports.quant_moe import Int4Experts, QuantMoeOps

_F32 = torch.float32


class CpuQuantMoeOps(QuantMoeOps):
    """Weights stay [E, out, in] int8, as vLLM loads them."""

    def __init__(self) -> None:
        self._quant = CpuQuantOps()

    def prepare_weights(
        self, w13: torch.Tensor, w2: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        check_int8_experts(w13, w2)
        return w13.contiguous(), w2.contiguous()

    def grouped_mlp_w8a8_dynamic(
        self,
        rows: torch.Tensor,
        group_sizes: torch.Tensor,
        w13: torch.Tensor,
        w13_scale: torch.Tensor,
        w2: torch.Tensor,
        w2_scale: torch.Tensor,
    ) -> torch.Tensor:
        return self._mlp(rows, group_sizes, w13, w13_scale, w2, w2_scale)

    def prepare_int4_experts(
        self, w13: torch.Tensor, w13_scale: torch.Tensor, w13_bias: torch.Tensor,
        w2: torch.Tensor, w2_scale: torch.Tensor, w2_bias: torch.Tensor,
    ) -> Int4Experts:
        check_int8_experts(w13, w2)
        for name, w in (("w13", w13), ("w2", w2)):
            check_int4_range(name, w)
        return Int4Experts(w13.contiguous(), w13_scale.to(_F32), w13_bias.to(_F32),
                           w2.contiguous(), w2_scale.to(_F32), w2_bias.to(_F32))

    def grouped_mlp_w4a8_dynamic(
        self, rows: torch.Tensor, group_sizes: torch.Tensor, experts: Int4Experts
    ) -> torch.Tensor:
        # x_q @ W exact in int32: scale_bias (the NPU kernel's correction) is not needed.
        return self._mlp(rows, group_sizes, experts.w13, experts.w13_scale, experts.w2,
                         experts.w2_scale)

    def _mlp(
        self, rows: torch.Tensor, group_sizes: torch.Tensor, w13: torch.Tensor,
        w13_scale: torch.Tensor, w2: torch.Tensor, w2_scale: torch.Tensor,
    ) -> torch.Tensor:
        sizes = group_sizes.tolist()
        inter = w2.shape[2]
        x_q, s1 = self._quant.quantize_per_token(rows)
        gate_up = _grouped_dequant_matmul(x_q, s1, sizes, w13, w13_scale).to(rows.dtype)
        # In float32, rounded once (as npu_swiglu does): fp32 rows are unchanged by it.
        wide = gate_up.to(_F32)
        act = (torch.nn.functional.silu(wide[:, :inter]) * wide[:, inter:]).to(rows.dtype)
        a_q, s2 = self._quant.quantize_per_token(act)
        return _grouped_dequant_matmul(a_q, s2, sizes, w2, w2_scale).to(rows.dtype)


def _grouped_dequant_matmul(
    x_q: torch.Tensor, token_scale: torch.Tensor, sizes: list[int], weight: torch.Tensor,
    scale: torch.Tensor,
) -> torch.Tensor:
    """float32 [N, out]: (float32(x_q @ weight[e]^T) * scale[e]) * token_scale, per group."""
    out = torch.empty(x_q.shape[0], weight.shape[1], dtype=_F32)
    start = 0
    for expert, count in enumerate(sizes):
        if count:
            rows = slice(start, start + count)
            out[rows] = int8_gemm(x_q[rows], weight[expert]).to(_F32) * scale[expert]
            start += count
    return out * token_scale.to(_F32).unsqueeze(-1)
