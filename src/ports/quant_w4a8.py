"""W4A8_DYNAMIC linear layers: int4 weights with a scale per output channel, activations
quantized to int8 per token.

T tokens, k input features, n output features; q the signed int4 values in [-8, 7].
Per token s = max|x| / 127 and x_q = round(x / s) (half to even, as ports/quant.py);
y[t, o] = float32(sum_i x_q[t, i] * q[o, i]) * scale[o] * s[t] (+ bias[o]), the int8 x int4
products exact in int32. scale_bias[o] = 8 * scale[o] * sum_i q[o, i] is ModelSlim's
correction term, which the NPU's int8 x int4 kernel takes; exact integer products need none.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from attrs import frozen

if TYPE_CHECKING:
    import torch


@frozen
class W4A8Weight:
    """A W4A8_DYNAMIC weight as one device holds it (its tensors in the device's layout,
    opaque to callers) and its sizes."""

    weight: torch.Tensor
    scale: torch.Tensor
    scale_bias: torch.Tensor
    n: int
    k: int


class W4A8LinearOps(abc.ABC):
    """The W4A8_DYNAMIC linear role of a device."""

    @abc.abstractmethod
    def w4a8_refusal(self, n: int, k: int) -> str | None:
        """Why this device cannot serve an [n, k] int4 weight (None when it can), in words
        for an error message."""

    @abc.abstractmethod
    def prepare_w4a8(
        self, values: torch.Tensor, scale: torch.Tensor, scale_bias: torch.Tensor
    ) -> W4A8Weight:
        """The weight from its int4 values (int8 [n, k], each in [-8, 7]), float32
        scale [n] and float32 scale_bias [n] (this rank's, summed over its slices)."""

    @abc.abstractmethod
    def w4a8_matmul(
        self, x: torch.Tensor, weight: W4A8Weight, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        """y = the module's formula for x [T, k] (+ bias [n]), [T, n] in x's dtype."""
