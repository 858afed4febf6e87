"""Weight-only int4 MoE experts (compressed-tensors W4A16): int4 expert weights with
group-wise (or per-channel) scales and optional zero points, float activations.

E experts, H hidden, I intermediate features per rank; each projection [out, in] of an
expert stands for w[o, i] = (q[o, i] - z[o, i // G]) * s[o, i // G] (q, z signed int4 in
[-8, 7], z = 0 for symmetric experts, G = in for one scale per output channel). An expert
computes down(silu(gate(x)) * up(x)), gate/up fused as w13 [E, 2I, H] (gate rows first).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from attrs import frozen

if TYPE_CHECKING:
    import torch


@frozen
class Int4ExpertWeights:
    """W4A16 experts as one device holds them (layouts opaque to callers).

    dense: the device serves them dequantized, w13 and w2 float [E, 2I, H] and [E, H, I]
    in the activations' dtype (scales and offsets None): the caller runs the float MoE
    path on them. Otherwise grouped_mlp_w4a16 reads them as they are.
    """

    w13: torch.Tensor
    w13_scale: torch.Tensor | None
    w13_offset: torch.Tensor | None
    w2: torch.Tensor
    w2_scale: torch.Tensor | None
    w2_offset: torch.Tensor | None
    group_size: int | None  # input features per scale group; None: per output channel
    dense: bool


class Int4ExpertOps(abc.ABC):
    """The W4A16 grouped-MLP role of a device."""

    @abc.abstractmethod
    def int4_experts_refusal(
        self, num_experts: int, hidden: int, inter: int, group_size: int | None,
        dtype: torch.dtype, expert_parallel: bool,
    ) -> str | None:
        """Why this device cannot serve num_experts W4A16 experts of hidden size `hidden`
        and `inter` intermediate features on this rank, with groups of `group_size` input
        features (None: per channel), activations of `dtype`, with or without expert
        parallelism (None when it can), in words for an error message."""

    @abc.abstractmethod
    def prepare_int4_experts(
        self,
        w13: torch.Tensor, w13_scale: torch.Tensor, w13_zero: torch.Tensor | None,
        w2: torch.Tensor, w2_scale: torch.Tensor, w2_zero: torch.Tensor | None,
        group_size: int | None, dtype: torch.dtype,
    ) -> Int4ExpertWeights:
        """From int4 values int8 w13 [E, 2I, H] and w2 [E, H, I] in [-8, 7], scales
        [E, out, groups] and zero points (int8 [E, out, groups] in [-8, 7], or None), for
        activations of `dtype`."""

    @abc.abstractmethod
    def grouped_mlp_w4a16(
        self, rows: torch.Tensor, group_sizes: torch.Tensor, experts: Int4ExpertWeights
    ) -> torch.Tensor:
        """Each group of rows through its expert: gate_up = x @ w13[e]^T, rounded to the
        rows' dtype; a = silu(gate) * up in float32, rounded once; out = a @ w2[e]^T in the
        rows' dtype. rows [N, H] in expert order, group_sizes [E] int64 (counts)."""
