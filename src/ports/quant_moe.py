"""Quantized MoE experts: W8A8_DYNAMIC and W4A8_DYNAMIC grouped MLPs.

The integer math of ports/quant.py per group of rows: each row is quantized per token
before each grouped matmul, int8 x int8 products accumulate in int32, and the result is
scaled by the expert's per-channel weight scale, then by the row's token scale.
N rows, H hidden, I expert intermediate size, E_local experts. W4A8_DYNAMIC is the same
math with int4 weights (values in [-8, 7]): int8 x int4 products are exact in int32.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from attrs import frozen

if TYPE_CHECKING:
    import torch


@frozen
class Int4Experts:
    """W4A8_DYNAMIC expert weights as one device holds them (layouts opaque to callers):
    w13 / w2 with their per-channel scales and the checkpoint's scale_bias (per expert
    8 * scale[o] * sum_i w[o, i], the correction the NPU's int8 x int4 grouped matmul
    takes; the host's exact integer products need none)."""

    w13: torch.Tensor
    w13_scale: torch.Tensor
    w13_bias: torch.Tensor
    w2: torch.Tensor
    w2_scale: torch.Tensor
    w2_bias: torch.Tensor


class QuantMoeOps(abc.ABC):
    """The quantized grouped-MLP role of a device."""

    @abc.abstractmethod
    def prepare_weights(
        self, w13: torch.Tensor, w2: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """int8 w13 [E, 2I, H] and w2 [E, H, I] in the layout grouped_mlp_w8a8_dynamic
        reads (still int8, same bytes)."""

    @abc.abstractmethod
    def grouped_mlp_w8a8_dynamic(
        self,
        rows: torch.Tensor,
        group_sizes: torch.Tensor,
        w13: torch.Tensor,
        w13_scale: torch.Tensor,
        w2: torch.Tensor,
        w2_scale: torch.Tensor,
    ) -> torch.Tensor:
        """Each group of rows through its int8 expert, as W8A8_DYNAMIC linears:

        s1 = max|x| / 127 per row, x_q = round(x / s1) (half to even);
        gate_up = (float32(x_q @ W13[e]^T) * w13_scale[e]) * s1, in the rows' dtype;
        a = silu(gate) * up in float32, rounded once to the rows' dtype (gate the first
        I columns); s2, a_q likewise;
        out = (float32(a_q @ W2[e]^T) * w2_scale[e]) * s2, in the rows' dtype.

        rows [N, H] in expert order, group_sizes [E_local] int64; weights as
        prepare_weights returned them; scales float32 [E, 2I] and [E, H].
        """

    @abc.abstractmethod
    def prepare_int4_experts(
        self, w13: torch.Tensor, w13_scale: torch.Tensor, w13_bias: torch.Tensor,
        w2: torch.Tensor, w2_scale: torch.Tensor, w2_bias: torch.Tensor,
    ) -> Int4Experts:
        """From int4 values held in int8 w13 [E, 2I, H] and w2 [E, H, I] (each in [-8, 7]),
        float32 scales and scale_bias [E, 2I] and [E, H]: what grouped_mlp_w4a8_dynamic
        reads."""

    @abc.abstractmethod
    def grouped_mlp_w4a8_dynamic(
        self, rows: torch.Tensor, group_sizes: torch.Tensor, experts: Int4Experts
    ) -> torch.Tensor:
        """grouped_mlp_w8a8_dynamic's math with the int4 expert weights of `experts`."""
