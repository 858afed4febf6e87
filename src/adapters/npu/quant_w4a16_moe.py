"""The W4A16 experts port on torch_npu: npu_convert_weight_to_int4pack per expert at load,
then npu_grouped_matmul in its antiquant (weight-only) mode around npu_swiglu, as the
reference plugin serves W4A16 MoE experts (vllm-project/vllm-ascend's W4A16 MoE method).

Facts from the 2.14.0 wheel's op docs (torch_npu/_op_plugin_docs.py, npu_grouped_matmul,
formula 4, "伪量化"): y = x @ ((weight + antiquant_offset) * antiquant_scale) + bias;
with group_list a tensor (A2/A3) x is float16 or bfloat16, the weight int8 or int4
(carried in int32), antiquant_scale and antiquant_offset in x's dtype, shaped [g, n] per
channel and [g, G, n] per group for one [g, k, n] weight tensor (G, the number of groups,
divides k); output_dtype None or x's dtype; an int4 weight's last dim (n) even; one x, one
weight and one output take group_type 0 and split_item 2/3, at most 1024 groups; every
inner dim below 65536. A zero point z is passed as the offset -z (the op adds it).
vllm-project/vllm-ascend passes zero offsets (its W4A16 MoE method serves symmetric
experts); asymmetric experts here use the offset as the docs define it, not verified on
hardware. Not run on hardware.
"""

from __future__ import annotations

from types import ModuleType

import torch

from adapters.npu.int4_pack import Int4ExpertPacking
from adapters.npu.moe import COUNTS, GROUP_M, SINGLE_OUTPUT
from ports.quant_w4a16_moe import Int4ExpertOps, Int4ExpertWeights

_HALF = (torch.float16, torch.bfloat16)
_INNER_LIMIT = 65536
_MAX_GROUPS = 1024  # group_list entries: experts on this rank
_PACK = 8  # int4 values per int32 (npu_convert_weight_to_int4pack's last dim)


class NpuInt4ExpertOps(Int4ExpertPacking, Int4ExpertOps):
    """Experts as int4 packs [E, in, out / 8] (ND), scales and offsets [E, groups, out]
    ([E, out] per channel) in the activations' dtype."""

    def __init__(self, torch_npu: ModuleType) -> None:
        self._torch_npu = torch_npu

    def int4_experts_refusal(
        self, num_experts: int, hidden: int, inter: int, group_size: int | None,
        dtype: torch.dtype, expert_parallel: bool,
    ) -> str | None:
        if dtype not in _HALF:
            return ("npu_grouped_matmul's antiquant (weight-only) mode takes float16 or "
                    f"bfloat16 activations, not {str(dtype).removeprefix('torch.')}")
        if expert_parallel:
            return ("the NPU's expert-parallel exchange (MC2, all-to-all) carries tokens to "
                    "float or W8A8_DYNAMIC experts; W4A16 experts are not wired into it")
        if num_experts > _MAX_GROUPS:
            return (f"npu_grouped_matmul takes at most {_MAX_GROUPS} groups, not "
                    f"{num_experts} experts on one rank")
        for what, n in (("the gate/up outputs (2 x intermediate)", 2 * inter),
                        ("the down outputs (hidden)", hidden)):
            if n % _PACK:
                return (f"npu_convert_weight_to_int4pack packs {what}, {n} features, "
                        f"which is not a multiple of {_PACK}")
        if max(hidden, 2 * inter) >= _INNER_LIMIT:
            return f"npu_grouped_matmul takes inner dims below {_INNER_LIMIT}"
        if group_size is not None and (group_size <= 0 or hidden % group_size
                                       or inter % group_size):
            return (f"npu_grouped_matmul's per-group antiquant needs a group count that "
                    f"divides each weight's input features, and a group size of "
                    f"{group_size} does not divide both the hidden size {hidden} and the "
                    f"{inter} intermediate features on this rank")
        return None

    def prepare_int4_experts(
        self,
        w13: torch.Tensor, w13_scale: torch.Tensor, w13_zero: torch.Tensor | None,
        w2: torch.Tensor, w2_scale: torch.Tensor, w2_zero: torch.Tensor | None,
        group_size: int | None, dtype: torch.dtype,
    ) -> Int4ExpertWeights:
        return Int4ExpertWeights(
            self._int4pack(w13), _antiquant(w13_scale, dtype, group_size),
            None if w13_zero is None else _antiquant(-w13_zero.to(torch.float32), dtype,
                                                     group_size),
            self._int4pack(w2), _antiquant(w2_scale, dtype, group_size),
            None if w2_zero is None else _antiquant(-w2_zero.to(torch.float32), dtype,
                                                    group_size),
            group_size, False,
        )

    def grouped_mlp_w4a16(
        self, rows: torch.Tensor, group_sizes: torch.Tensor, experts: Int4ExpertWeights
    ) -> torch.Tensor:
        if rows.shape[0] == 0:
            return rows.new_zeros(0, experts.w2.shape[2] * _PACK)
        gate_up = self._antiquant_matmul(rows, experts.w13, experts.w13_scale,
                                         experts.w13_offset, group_sizes)
        act = self._torch_npu.npu_swiglu(gate_up, dim=-1)
        return self._antiquant_matmul(act, experts.w2, experts.w2_scale, experts.w2_offset,
                                      group_sizes)

    def _antiquant_matmul(
        self, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None,
        offset: torch.Tensor | None, group_sizes: torch.Tensor,
    ) -> torch.Tensor:
        out: torch.Tensor = self._torch_npu.npu_grouped_matmul(
            [x],
            [weight],
            antiquant_scale=[scale],
            antiquant_offset=None if offset is None else [offset],
            group_list=group_sizes,
            group_list_type=COUNTS,
            group_type=GROUP_M,
            split_item=SINGLE_OUTPUT,
            output_dtype=x.dtype,
        )[0]
        return out


def _antiquant(t: torch.Tensor, dtype: torch.dtype, group_size: int | None) -> torch.Tensor:
    """[E, out, groups] -> [E, groups, out] in dtype; per channel [E, out]."""
    held = t.to(dtype).transpose(1, 2).contiguous()
    return held[:, 0].contiguous() if group_size is None else held
