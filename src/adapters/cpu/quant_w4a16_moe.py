"""The W4A16 experts port in plain torch on the host: each expert dequantized once,
exactly, then the float grouped MLP (the host twin of the NPU's antiquant grouped matmul)."""

from __future__ import annotations

import torch

from adapters.cpu.moe import CpuMoeOps
from ports.quant_w4a16_moe import Int4ExpertOps, Int4ExpertWeights

_F32 = torch.float32


def dequantize_int4_experts(values: torch.Tensor, scale: torch.Tensor,
                            zero: torch.Tensor | None) -> torch.Tensor:
    """float32 w[e, o, i] = (q[e, o, i] - z[e, o, i // G]) * s[e, o, i // G], G the input
    features per scale group (in / groups): (q - z) is a small integer, so one exact
    product per weight."""
    group = values.shape[2] // scale.shape[2]
    diff = values.to(_F32)
    if zero is not None:
        diff = diff - zero.to(_F32).repeat_interleave(group, dim=2)
    return diff * scale.to(_F32).repeat_interleave(group, dim=2)


class CpuInt4ExpertOps(Int4ExpertOps):
    """Holds each expert dequantized in the activations' dtype (rounded once from float32),
    dense: the MoE layer runs the float path (MoeOps) on them. Any group size that
    divides the input features; expert parallelism as the float experts."""

    def __init__(self) -> None:
        self._moe = CpuMoeOps(native_kernels=False)

    def int4_experts_refusal(
        self, num_experts: int, hidden: int, inter: int, group_size: int | None,
        dtype: torch.dtype, expert_parallel: bool,
    ) -> str | None:
        if group_size is not None and (group_size <= 0 or hidden % group_size
                                       or inter % group_size):
            return (f"a group size of {group_size} does not divide both the hidden size "
                    f"{hidden} (gate/up inputs) and the {inter} intermediate features on "
                    "this rank (down inputs)")
        return None

    def prepare_int4_experts(
        self,
        w13: torch.Tensor, w13_scale: torch.Tensor, w13_zero: torch.Tensor | None,
        w2: torch.Tensor, w2_scale: torch.Tensor, w2_zero: torch.Tensor | None,
        group_size: int | None, dtype: torch.dtype,
    ) -> Int4ExpertWeights:
        dense13 = dequantize_int4_experts(w13, w13_scale, w13_zero).to(dtype).contiguous()
        dense2 = dequantize_int4_experts(w2, w2_scale, w2_zero).to(dtype).contiguous()
        return Int4ExpertWeights(dense13, None, None, dense2, None, None, group_size, True)

    def grouped_mlp_w4a16(
        self, rows: torch.Tensor, group_sizes: torch.Tensor, experts: Int4ExpertWeights
    ) -> torch.Tensor:
        return self._moe.grouped_mlp(rows, group_sizes, experts.w13, experts.w2)
