"""The quantized grouped MLP on torch_npu: npu_dynamic_quant, then npu_grouped_matmul with
`scale` / `per_token_scale`, npu_swiglu, and again for the down projection.

Facts from the 2.14.0 wheel's op docs (torch_npu/_op_plugin_docs.py): npu_grouped_matmul's
per-token quantization case (group_list a tensor) takes int8 x and weight, a float32 or
bfloat16 `scale`, a float32 `per_token_scale` and outputs bfloat16 or float16 (no float32);
one x, one [G, K, N] weight and one output need group_type 0 and split_item 2/3.
The scale as [G, N] (one row per expert) is how vllm-project/vllm-ascend passes it; the
docs describe a 1-D scale per tensor. Not run on hardware.

W4A8_DYNAMIC (int8 x, int4 weights): the 2.14.0 docs of npu_grouped_matmul list int4
weights (carried in int32, eight per word) but give the A8W4 operands only in the docs of
npu_grouped_matmul_finalize_routing (the same kernel): weight ND [e, k, n], scale int64
[e, 1, n] (the float32 bits), bias float32 2-D, a8w4 only. The bias is the checkpoint's
scale_bias (8 * scale * row sum), as vllm-project/vllm-ascend passes it: the kernel's
correction, not a bias of the model. Output bfloat16 (the reference's choice), then the
rows' dtype. Weights repacked at load by npu_convert_weight_to_int4pack, per expert.
"""

from __future__ import annotations

from types import ModuleType

import torch

from adapters.npu.int4_pack import Int4ExpertPacking
from adapters.npu.moe import COUNTS, GROUP_M, SINGLE_OUTPUT
from adapters.torch.expert_weights import check_int8_experts
from ports.quant_moe import Int4Experts, QuantMoeOps


class NpuQuantMoeOps(Int4ExpertPacking, QuantMoeOps):
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

    def prepare_int4_experts(
        self,
        w13: torch.Tensor,
        w13_scale: torch.Tensor,
        w13_bias: torch.Tensor,
        w2: torch.Tensor,
        w2_scale: torch.Tensor,
        w2_bias: torch.Tensor,
    ) -> Int4Experts:
        check_int8_experts(w13, w2)
        return Int4Experts(
            self._int4pack(w13),
            _scale_bits(w13_scale),
            w13_bias.to(torch.float32).contiguous(),
            self._int4pack(w2),
            _scale_bits(w2_scale),
            w2_bias.to(torch.float32).contiguous(),
        )

    def grouped_mlp_w4a8_dynamic(
        self, rows: torch.Tensor, group_sizes: torch.Tensor, experts: Int4Experts
    ) -> torch.Tensor:
        if rows.shape[0] == 0:
            return rows.new_zeros(0, experts.w2_scale.shape[-1])
        x_q, token_scale = self._torch_npu.npu_dynamic_quant(rows, dst_type=torch.int8)
        gate_up = self._int4_matmul(
            x_q, token_scale, experts.w13, experts.w13_scale, experts.w13_bias, group_sizes
        )
        act = self._torch_npu.npu_swiglu(gate_up, dim=-1)
        act_q, act_scale = self._torch_npu.npu_dynamic_quant(act, dst_type=torch.int8)
        out = self._int4_matmul(
            act_q, act_scale, experts.w2, experts.w2_scale, experts.w2_bias, group_sizes
        )
        return out.to(rows.dtype)

    def _int4_matmul(
        self,
        x_q: torch.Tensor,
        token_scale: torch.Tensor,
        weight: torch.Tensor,
        scale: torch.Tensor,
        bias: torch.Tensor,
        group_sizes: torch.Tensor,
    ) -> torch.Tensor:
        out: torch.Tensor = self._torch_npu.npu_grouped_matmul(
            [x_q],
            [weight],
            bias=[bias],
            scale=[scale],
            per_token_scale=[token_scale],
            group_list=group_sizes,
            group_list_type=COUNTS,
            group_type=GROUP_M,
            split_item=SINGLE_OUTPUT,
            output_dtype=torch.bfloat16,
        )[0]
        return out

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


def _scale_bits(scale: torch.Tensor) -> torch.Tensor:
    """float32 [E, n] -> int64 [E, 1, n] holding each float32's bits (zero-extended), the
    A8W4 scale operand."""
    bits = scale.to(torch.float32).contiguous().view(torch.int32).to(torch.int64)
    return (bits & 0xFFFFFFFF).unsqueeze(1).contiguous()
