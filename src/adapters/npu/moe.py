"""The MoE role on torch_npu's MoE operators, with the host adapter's semantics.

Every torch_npu call goes through `self._torch_npu` (injected; the emulator in tests),
checked against the 2.14.0 schemas by tests/unit/npu/test_npu_contract.py. Facts and
limits are from the op docs in the wheel (torch_npu/_op_plugin_docs.py); the layout
assumptions are listed in docs/npu-ops.md.
"""

from __future__ import annotations

from types import ModuleType

import torch

from ascend_core.errors import UnsupportedFeatureError
from ports.moe import SILU_MLP, ExpertMlp, GateKind, MoeOps, Permutation, Routing, Scoring

MAX_EXPERTS = 2048  # npu_moe_gating_top_k: x's last dim
GROUP_ALIGN = 32  # experts per group, aligned to 32, times groups <= MAX_EXPERTS
SIGMOID, TOP2_SUM, GROUP_MAX = 1, 1, 0  # norm_type / group_select_mode values
COUNTS = 1  # group_list_type and expert_tokens_num_type: sizes, not cumulative sums
SCATTER_INDEX = 1  # row_idx_type: expanded_row_idx[i] = source (token, slot) of row i
SINGLE_OUTPUT = 2  # split_item: one output tensor for all groups
GROUP_M = 0  # group_type: groups split the rows (the M axis)
NO_QUANT = -1


class NpuMoeOps(MoeOps):
    """MoE through npu_moe_gating_top_k(_softmax), npu_moe_init_routing_v2,
    npu_grouped_matmul, npu_swiglu and npu_moe_token_unpermute."""

    def __init__(self, torch_npu: ModuleType) -> None:
        self._torch_npu = torch_npu

    def check(
        self, routing: Routing, num_experts: int, dtype_name: str, mlp: ExpertMlp = SILU_MLP
    ) -> None:
        problems = []
        if routing.scoring is Scoring.SIGMOID:
            if not routing.renormalize:
                problems.append(
                    "sigmoid scores without renormalisation (npu_moe_gating_top_k "
                    "divides the k weights by their sum)"
                )
            if routing.grouped:
                groups = routing.num_expert_group or 1
                per_group = num_experts // groups
                aligned = -(-per_group // GROUP_ALIGN) * GROUP_ALIGN
                if num_experts % groups or per_group <= 2 or aligned * groups > MAX_EXPERTS:
                    problems.append(
                        f"{num_experts} experts in {groups} groups (npu_moe_gating_top_k needs "
                        f"equal groups of more than 2 experts, aligned to {GROUP_ALIGN} x groups "
                        f"<= {MAX_EXPERTS})"
                    )
        elif routing.grouped:
            problems.append(
                "grouped top-k over softmax scores (npu_moe_gating_top_k_softmax has no groups)"
            )
        if num_experts > MAX_EXPERTS:
            problems.append(f"{num_experts} experts (at most {MAX_EXPERTS})")
        if dtype_name != "bfloat16":
            problems.append(f"dtype {dtype_name} (npu_moe_token_unpermute takes bfloat16 only)")
        if problems:
            raise UnsupportedFeatureError(
                "The NPU MoE ops cannot run this layer: " + "; ".join(problems) + ".",
                "serve in bfloat16 a model whose routing the ops support, or serve on the "
                "host device (VLLM_ASCEND_DEVICE=cpu)",
            )

    def route(
        self,
        router_logits: torch.Tensor,
        routing: Routing,
        correction_bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logits = router_logits.float()  # weights come back in x's dtype: float32
        if routing.scoring is Scoring.SIGMOID:
            weights, ids, _ = self._torch_npu.npu_moe_gating_top_k(
                logits,
                routing.top_k,
                bias=None if correction_bias is None else correction_bias.float(),
                k_group=routing.topk_group if routing.grouped else 1,
                group_count=routing.num_expert_group if routing.grouped else 1,
                group_select_mode=TOP2_SUM if correction_bias is not None else GROUP_MAX,
                renorm=0,
                norm_type=SIGMOID,
                routed_scaling_factor=routing.routed_scaling_factor,
                eps=1e-20,
            )
            return weights, ids
        weights, ids, _ = self._torch_npu.npu_moe_gating_top_k_softmax(
            logits, None, k=routing.top_k
        )
        if routing.renormalize:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        if routing.routed_scaling_factor != 1.0:
            weights = weights * routing.routed_scaling_factor
        return weights, ids

    def permute(
        self, hidden: torch.Tensor, local_ids: torch.Tensor, num_local_experts: int
    ) -> tuple[torch.Tensor, Permutation]:
        """npu_moe_init_routing_v2 over local ids, other ranks' slots outside the active range.

        A slot of -1 becomes expert E_local, one past the active range [0, E_local), so the
        op drops it; rows come sorted by expert, ties in (token, slot) order. All T*k rows
        are returned, as the op makes them: the first sum(counts) are the local experts'
        and the rest (other ranks' slots, expert parallel only) are padding. Nothing is
        read back, so the shapes depend on T alone and the layer fits in an NPU graph.
        """
        num_tokens, top_k = local_ids.shape
        ids = torch.where(local_ids >= 0, local_ids, num_local_experts).to(torch.int32)
        expanded, source, counts, _ = self._torch_npu.npu_moe_init_routing_v2(
            hidden,
            ids,
            active_num=-1,
            expert_num=num_local_experts + 1,
            drop_pad_mode=0,
            expert_tokens_num_type=COUNTS,
            expert_tokens_num_flag=True,
            quant_mode=NO_QUANT,
            active_expert_range=[0, num_local_experts],
            row_idx_type=SCATTER_INDEX,
        )
        permutation = Permutation(source.long(), counts.long(), num_tokens, top_k)
        return expanded, permutation

    def grouped_mlp(
        self,
        rows: torch.Tensor,
        group_sizes: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        *,
        mlp: ExpertMlp = SILU_MLP,
        biases: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Two npu_grouped_matmul calls around npu_swiglu (gpt-oss: npu_clipped_swiglu,
        interleaved, bias 1.0 on the up half; DeepSeek-V4: npu_clipped_swiglu over the
        halves, alpha 1, bias 0); weights as [E, in, out] views.

        Expert biases are added after each matmul, in the rows' dtype as the host adds
        them (the op's own bias input is not used: its rounding is the kernel's), each
        row's bias picked by its expert from the cumulative group sizes on the device.
        """
        if rows.shape[0] == 0:
            return rows.new_zeros(0, w2.shape[1])
        if mlp.biased != (biases is not None):
            raise ValueError("grouped_mlp: pass biases exactly when ExpertMlp.biased")
        expert_of_row = None
        if biases is not None:
            ends = torch.cumsum(group_sizes, 0)
            order = torch.arange(rows.shape[0], device=rows.device)
            expert_of_row = torch.searchsorted(ends, order, right=True).clamp_(max=w13.shape[0] - 1)
        gate_up = self._grouped_matmul(rows, w13.transpose(1, 2), group_sizes)
        if biases is not None and expert_of_row is not None:
            gate_up = gate_up + biases[0].to(gate_up.dtype).index_select(0, expert_of_row)
        if mlp.gate is GateKind.SWIGLU_OAI:
            act = self._torch_npu.npu_clipped_swiglu(
                gate_up, dim=-1, alpha=mlp.alpha, limit=mlp.limit, bias=1.0, interleaved=True
            )
        elif mlp.gate is GateKind.SILU_CLAMPED:
            # The same op's formula A * sigmoid(alpha * A) * (B + bias) over the halves
            # (not interleaved), with alpha 1 and bias 0, is silu(A) * B with its clamps.
            act = self._torch_npu.npu_clipped_swiglu(
                gate_up, dim=-1, alpha=1.0, limit=mlp.limit, bias=0.0, interleaved=False
            )
        else:
            act = self._torch_npu.npu_swiglu(gate_up, dim=-1)
        out = self._grouped_matmul(act, w2.transpose(1, 2), group_sizes)
        if biases is not None and expert_of_row is not None:
            out = out + biases[1].to(out.dtype).index_select(0, expert_of_row)
        return out

    def _grouped_matmul(
        self, x: torch.Tensor, weight: torch.Tensor, group_sizes: torch.Tensor
    ) -> torch.Tensor:
        """x [N, K] rows in groups of group_sizes, times weight [G, K, M]: one output [N, M]."""
        out: torch.Tensor = self._torch_npu.npu_grouped_matmul(
            [x],
            [weight],
            group_list=group_sizes,
            group_list_type=COUNTS,
            group_type=GROUP_M,
            split_item=SINGLE_OUTPUT,
        )[0]
        return out

    def unpermute(
        self, rows: torch.Tensor, permutation: Permutation, weights: torch.Tensor
    ) -> torch.Tensor:
        """npu_moe_token_unpermute over all T*k slots, with a gather index.

        The op reads slot k of token t from row sorted_indices[t*k + j] (CANN's
        aclnnMoeTokenUnpermute: T[k] = T[S[k]]), so the index is the inverse of the
        permutation's source rows. Rows past the kept count (sum of the group sizes, on
        the device) are padding: their source entries are undefined, so they scatter into
        a spare slot past the end, and their content is zeroed; a slot left out (another
        rank's expert) reads the last row, which is padding whenever a slot was left out.
        Fixed-size index ops on the device, no host read.
        """
        total = permutation.num_tokens * permutation.top_k
        if total == 0:
            return rows.new_zeros(0, rows.shape[1])
        device = rows.device
        order = torch.arange(total, dtype=torch.int64, device=device)
        kept = order < permutation.group_sizes.sum()
        target = torch.where(kept, permutation.source_rows, total)
        gather = torch.full((total + 1,), total - 1, dtype=torch.int32, device=device)
        gather.scatter_(0, target, order.to(torch.int32))
        rows = rows.masked_fill(~kept.unsqueeze(1), 0)
        out: torch.Tensor = self._torch_npu.npu_moe_token_unpermute(
            rows, gather[:total], probs=weights.to(rows.dtype)
        )
        return out
