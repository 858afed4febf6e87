"""The W4A16 port on torch_npu: npu_convert_weight_to_int4pack at load, then
npu_weight_quant_batchmatmul per call, as the reference plugin serves compressed-tensors
W4A16.

Facts from the op docs in the 2.14.0 wheel (A2/A3): x is float16 or bfloat16 [M, K];
weight int32 carrying eight int4 values (npu_convert_weight_to_int4pack of an int32
[K, N] in [-8, 7], N a multiple of 8); the op computes (weight + antiquant_offset) *
antiquant_scale, so a zero point z is passed as the offset -z; per-group
antiquant_scale/antiquant_offset are [ceil(K / G), N] in x's dtype, with G in [32, K - 1]
and a multiple of 32; per channel they are [N] and the group size 0; K and N in [1, 65535];
a bias is float32 for bfloat16 x and float16 for float16 x.
"""

from __future__ import annotations

from types import ModuleType

import torch

from ports.quant_w4a16 import Int4Weight, Int4WeightOps

_MAX_DIM = 65535
_GROUP_ALIGN = 32
_PACK = 8


class NpuInt4WeightOps(Int4WeightOps):
    """Weights as [K, N / 8] int4 packs (ND), scales and offsets [groups, N]."""

    def __init__(self, torch_npu: ModuleType) -> None:
        self._torch_npu = torch_npu

    def int4_refusal(self, n: int, k: int, group_size: int) -> str | None:
        if not (1 <= n <= _MAX_DIM and 1 <= k <= _MAX_DIM):
            return f"npu_weight_quant_batchmatmul takes K and N in [1, {_MAX_DIM}], not {k}, {n}"
        if n % _PACK:
            return (f"npu_convert_weight_to_int4pack packs N = {n} output features, "
                    f"which is not a multiple of {_PACK}")
        if group_size == k:
            return None  # one group: per channel
        if group_size % _GROUP_ALIGN or not _GROUP_ALIGN <= group_size < k or k % group_size:
            return (f"npu_weight_quant_batchmatmul takes a group size that is a multiple of "
                    f"{_GROUP_ALIGN} in [{_GROUP_ALIGN}, K - 1] (K = {k}), not {group_size}")
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
        packed = self._torch_npu.npu_convert_weight_to_int4pack(
            values.t().to(torch.int32).contiguous()
        )
        scale_kn = scale.t().to(dtype).contiguous()
        offset = None if zero is None else (-zero.t().to(torch.float32)).to(dtype).contiguous()
        if group_size == k:  # per channel: [N] and group size 0
            scale_kn = scale_kn.reshape(n)
            offset = None if offset is None else offset.reshape(n)
        return Int4Weight(packed, scale_kn, offset, n, k, group_size)

    def int4_matmul(
        self, x: torch.Tensor, weight: Int4Weight, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        if bias is not None:
            bias = bias.to(torch.float32 if x.dtype == torch.bfloat16 else x.dtype)
        group = 0 if weight.group_size == weight.k else weight.group_size
        y: torch.Tensor = self._torch_npu.npu_weight_quant_batchmatmul(
            x, weight.packed, weight.scale, weight.offset, None, None, bias, group
        )
        return y
