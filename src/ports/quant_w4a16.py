"""Weight-only int4 matmul (W4A16): int4 weights with group-wise scales and optional zero
points, float activations and output.

n output features, k input features, G input features per group (G = k: one scale per
output channel). The weight a layer stands for is
    w[o, i] = (q[o, i] - z[o, i // G]) * s[o, i // G]
with q and z signed int4 values in [-8, 7] (z = 0 for symmetric layers); y = x @ w^T + bias.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from attrs import frozen

if TYPE_CHECKING:
    import torch


@frozen
class Int4Weight:
    """A W4A16 weight as one device holds it: its tensors in the device's own layout
    (opaque to callers) and the shape facts its matmul needs."""

    packed: torch.Tensor
    scale: torch.Tensor
    offset: torch.Tensor | None
    n: int
    k: int
    group_size: int


class Int4WeightOps(abc.ABC):
    """The W4A16 linear role of a device."""

    @abc.abstractmethod
    def int4_refusal(self, n: int, k: int, group_size: int) -> str | None:
        """Why this device cannot serve an [n, k] int4 weight with groups of `group_size`
        input features (None when it can), in words for an error message."""

    @abc.abstractmethod
    def prepare_int4(
        self,
        values: torch.Tensor,
        scale: torch.Tensor,
        zero: torch.Tensor | None,
        group_size: int,
        dtype: torch.dtype,
    ) -> Int4Weight:
        """The weight from its int4 values (int8 [n, k] in [-8, 7]), scales [n, k / G] and
        zero points (int8 [n, k / G] in [-8, 7], or None), for activations of `dtype`."""

    @abc.abstractmethod
    def int4_matmul(
        self, x: torch.Tensor, weight: Int4Weight, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        """y = x [T, k] @ w^T (+ bias [n]), [T, n] in x's dtype."""
