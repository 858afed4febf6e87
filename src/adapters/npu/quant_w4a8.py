"""The W4A8_DYNAMIC linear port on torch_npu: npu_dynamic_quant, then npu_grouped_matmul
with the layer's int4 weight as one group (A8W4).

Facts from the 2.14.0 wheel's op docs (torch_npu/_op_plugin_docs.py): npu_quant_matmul
takes int4 weights (int32, eight per word) only with int4 activations (x1 and x2 of one
dtype; no int8 x int4 row in its table), while npu_grouped_matmul_finalize_routing's docs
give the A8W4 operands of the grouped kernel: weight ND [g, k, n / 8] int32, scale int64
[g, 1, n] (the float32 bits), bias float32 [g, n] (the checkpoint's scale_bias, 8 * scale *
row sum, as vllm-project/vllm-ascend passes it), per_token_scale float32 [m], output
bfloat16. vllm-project/vllm-ascend runs its per-channel W4A8 shared experts so (one group,
its count list); here the group list is cumulative ([T], group_list_type 0), since the docs
refuse a count list of length 1. Weights repacked once at load by
npu_convert_weight_to_int4pack. Not run on hardware.
"""

from __future__ import annotations

from types import ModuleType

import torch

from adapters.npu.moe import GROUP_M, SINGLE_OUTPUT
from adapters.torch.expert_weights import check_int4_linear
from ascend_core.quantization.w4a8 import NPU_MAX_DIM as _MAX_DIM
from ascend_core.quantization.w4a8 import NPU_PACK as _PACK
from ports.quant_w4a8 import W4A8LinearOps, W4A8Weight

_CUMULATIVE = 0  # group_list_type: cumulative group ends


class NpuW4A8LinearOps(W4A8LinearOps):
    """The weight as int32 [1, k, n / 8] (ND), its scale as int64 [1, 1, n] and scale_bias
    float32 [1, n]."""

    def __init__(self, torch_npu: ModuleType) -> None:
        self._torch_npu = torch_npu

    def w4a8_refusal(self, n: int, k: int) -> str | None:
        if n % _PACK:
            return (f"its {n} output features per rank are not a multiple of {_PACK} (the "
                    "NPU packs eight int4 values per int32 along them)")
        if n >= _MAX_DIM or k >= _MAX_DIM:
            return (f"npu_grouped_matmul takes inner dimensions below {_MAX_DIM}, and the "
                    f"layer is [{n}, {k}] per rank")
        return None

    def prepare_w4a8(
        self, values: torch.Tensor, scale: torch.Tensor, scale_bias: torch.Tensor
    ) -> W4A8Weight:
        check_int4_linear(values)
        n, k = values.shape
        packed = self._torch_npu.npu_convert_weight_to_int4pack(
            values.t().to(torch.int32).contiguous())
        bits = scale.to(torch.float32).reshape(-1).contiguous().view(torch.int32)
        scale64 = (bits.to(torch.int64) & 0xFFFFFFFF).reshape(1, 1, n).contiguous()
        bias = scale_bias.to(torch.float32).reshape(1, n).contiguous()
        return W4A8Weight(packed.unsqueeze(0).contiguous(), scale64, bias, n, k)

    def w4a8_matmul(
        self, x: torch.Tensor, weight: W4A8Weight, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        rows = x.shape[0]
        if rows == 0:
            return x.new_zeros(0, weight.n)
        x_q, token_scale = self._torch_npu.npu_dynamic_quant(x, dst_type=torch.int8)
        # Made on the device: a host list would copy, which graph capture refuses.
        ends = torch.full((1,), rows, dtype=torch.int64, device=x.device)
        out: torch.Tensor = self._torch_npu.npu_grouped_matmul(
            [x_q],
            [weight.weight],
            bias=[weight.scale_bias],
            scale=[weight.scale],
            per_token_scale=[token_scale],
            group_list=ends,
            group_list_type=_CUMULATIVE,
            group_type=GROUP_M,
            split_item=SINGLE_OUTPUT,
            output_dtype=torch.bfloat16,
        )[0]
        y = out.to(x.dtype)
        return y if bias is None else y + bias
