"""The quantized grouped MLP on torch_npu: npu_dynamic_quant, then npu_grouped_matmul with
`scale` / `per_token_scale`, npu_swiglu, and again for the down projection.

Facts from the 2.14.0 wheel's op docs (torch_npu/_op_plugin_docs.py): npu_grouped_matmul's
per-token quantization case (group_list a tensor) takes int8 x and weight, a float32 or
bfloat16 `scale`, a float32 `per_token_scale` and outputs bfloat16 or float16 (no float32);
one x, one [G, K, N] weight and one output need group_type 0 and split_item 2/3.
The scale as [G, N] (one row per expert) is how vllm-project/vllm-ascend passes it; the
docs describe a 1-D scale per tensor. Not run on hardware.
"""

from __future__ import annotations

from types import ModuleType

import torch

from adapters.npu.moe import COUNTS, GROUP_M, SINGLE_OUTPUT
from adapters.torch.expert_weights import check_int8_experts
from ports.quant_moe import QuantMoeOps


class NpuQuantMoeOps(QuantMoeOps):
    """Expert weights as [E, in, out] int8 (transposed once at load, ND layout)."""

    def __init__(self, torch_npu: ModuleType) -> None:
        self._torch_npu = torch_npu

    def prepare_weights(
        self, w13: torch.Tensor, w2: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        check_int8_experts(w13, w2)
        return w13.transpose(1, 2).contiguous(), w2.transpose(1, 2).contiguous()

    def grouped_mlp_w8a8_dynamic(
        self,
        rows: torch.Tensor,
        group_sizes: torch.Tensor,
        w13: torch.Tensor,
        w13_scale: torch.Tensor,
        w2: torch.Tensor,
        w2_scale: torch.Tensor,
    ) -> torch.Tensor:
        if rows.shape[0] == 0:
            return rows.new_zeros(0, w2.shape[2])
        x_q, token_scale = self._torch_npu.npu_dynamic_quant(rows, dst_type=torch.int8)
        return self.grouped_mlp_w8a8_quantized(
            x_q, token_scale, group_sizes, w13, w13_scale, w2, w2_scale, rows.dtype
        )

    def grouped_mlp_w8a8_quantized(
        self,
        rows_q: torch.Tensor,
        row_scale: torch.Tensor,
        group_sizes: torch.Tensor,
        w13: torch.Tensor,
        w13_scale: torch.Tensor,
        w2: torch.Tensor,
        w2_scale: torch.Tensor,
        dtype: torch.dtype,
    ) -> torch.Tensor:
        """grouped_mlp_w8a8_dynamic from rows already quantized per token (int8 rows and
        their float32 scales, as MC2's dispatch sends W8A8_DYNAMIC tokens); out in dtype."""
        gate_up = self._int8_matmul(rows_q, row_scale, w13, w13_scale, group_sizes, dtype)
        act = self._torch_npu.npu_swiglu(gate_up, dim=-1)
        act_q, act_scale = self._torch_npu.npu_dynamic_quant(act, dst_type=torch.int8)
        return self._int8_matmul(act_q, act_scale, w2, w2_scale, group_sizes, dtype)

    def _int8_matmul(
        self,
        x_q: torch.Tensor,
        token_scale: torch.Tensor,
        weight: torch.Tensor,
        scale: torch.Tensor,
        group_sizes: torch.Tensor,
        dtype: torch.dtype,
    ) -> torch.Tensor:
        out: torch.Tensor = self._torch_npu.npu_grouped_matmul(
            [x_q],
            [weight],
            scale=[scale],
            per_token_scale=[token_scale],
            group_list=group_sizes,
            group_list_type=COUNTS,
            group_type=GROUP_M,
            split_item=SINGLE_OUTPUT,
            output_dtype=dtype,
        )[0]
        return out
