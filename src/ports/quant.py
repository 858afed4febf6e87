"""Quantized matmul: int8 activations times int8 weights, int32 accumulation, float output.

Every device adapter computes the same integers; the host adapter's is the reference.
T tokens, k input features, n output features. round() is round-half-to-even and
saturate() clamps to the int8 range; scales are float32 and products are taken in
float32 in the order written.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class QuantOps(abc.ABC):
    """The quantized-linear role of a device."""

    @abc.abstractmethod
    def prepare_weight(self, weight: torch.Tensor) -> torch.Tensor:
        """int8 weight [n, k] in the layout this device's quant_matmul reads (still int8)."""

    @abc.abstractmethod
    def prepare_scale(self, scale: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        """float32 output scale [n] in the form quant_matmul takes for `out_dtype`.

        For float16 output without per-token scales the scale is applied at FP19
        (the low 13 mantissa bits of the float32 dropped), as the NPU's int64 scale
        path does; other outputs use the float32 scale as given.
        """

    @abc.abstractmethod
    def quantize_per_token(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x_q int8 [T, k], s float32 [T]): s = max|x| / 127 per row, x_q = round(x / s).

        A row of zeros has s = 0 and x_q = 0.
        """

    @abc.abstractmethod
    def quantize_static(
        self, x: torch.Tensor, inv_scale: torch.Tensor, offset: torch.Tensor
    ) -> torch.Tensor:
        """x_q = saturate(round(x * inv_scale + offset)), int8 [T, k], the product and sum
        taken in float32 (as npu_quantize computes them).

        inv_scale and offset are [1] (per tensor) in x's dtype, as npu_quantize takes
        them: 1 / input_scale computed in that dtype and the integer-valued input_offset
        (the vLLM layers hold them so).
        """

    @abc.abstractmethod
    def quant_matmul(
        self,
        x_q: torch.Tensor,
        weight: torch.Tensor,
        scale: torch.Tensor,
        out_dtype: torch.dtype,
        pertoken_scale: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """y[t, n] = float32(acc[t, n] + bias[n]) * scale[n] (* pertoken_scale[t]), as out_dtype.

        acc = x_q [T, k] @ weight^T in int32 (weight as prepare_weight returned it);
        bias int32 [n] or None; scale as prepare_scale returned it.
        """
