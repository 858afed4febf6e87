"""Expert parallelism on the NPU: the core's communication method run with torch_npu's ops.

Each rank brings its own tokens ([T, H], their global expert ids [T, k] and weights) and
gets back their outputs over all experts; the EP group's ranks hold equal slices of the
experts (rank r: experts [r * E_local, (r + 1) * E_local), vLLM's linear placement).

- MC2: npu_moe_distribute_dispatch_v2 sends each token to the ranks holding its experts,
  npu_grouped_matmul runs the local experts, npu_moe_distribute_combine_v2 brings the rows
  back weighted and summed. Nothing is read back to the host (capturable).
- all-to-all: npu_moe_init_routing_v2 sorts the token rows by global expert, the counts go
  to the host for the splits, all_to_all_single sends the rows to their experts' ranks, the
  local experts run, the rows come back and npu_moe_token_unpermute combines them.
- all-gather: every rank's tokens gathered, the local experts run on all of them (slots of
  other ranks' experts left out), the partial sums all-reduced and each rank keeps its own.

W8A8_DYNAMIC experts (ep_experts_w8a8_dynamic): MC2's dispatch quantizes each token
(quant_mode 2) and the int8 rows travel with their float32 per-token scales; all-to-all
quantizes the permuted rows with npu_dynamic_quant (the same per-token formula) and sends
int8 rows and scales; both feed the first int8 grouped matmul as they arrive. All-gather
gathers the tokens as they are and quantizes on the receiving rank (its experts' first
matmul), as the reference's all-gather path does.

The all-to-all and all-gather paths read counts on the host (eager steps only).
vLLM's MoE layer reaches these through ports.moe_comm.MoeCommOps (ep_experts); the
communicator's name is the EP group's `npu` backend's get_hccl_comm_name, as torch_npu
offers it.
The argument meanings are torch_npu 2.14.0's (src/adapters/npu/schemas); the emulator's
cross-rank semantics are in tests/support/torch_npu_emulator/semantics_mc2.py.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import torch
import torch.distributed as dist
from attrs import frozen

from adapters.npu.moe import COUNTS, NpuMoeOps
from adapters.npu.quant_moe import NpuQuantMoeOps
from ascend_core.moe.comm_method import MoeCommMethod
from ascend_core.moe.decision import MoeDecision
from ports.moe import SILU_MLP, ExpertMlp
from ports.moe_comm import ExpertParallelGroup, MoeCommOps

NO_QUANT, DYNAMIC_INT8 = 0, 2  # dispatch quant_mode


@frozen
class EpDomain:
    """The expert-parallel group as the ops name it.

    group: the device process group; group_name: its HCCL communicator's name (what the
    MC2 ops take as group_ep); num_experts: routed experts in all (moe_expert_num);
    max_tokens: the most tokens a rank brings to a step (MC2's global_bs / ep_size).
    """

    group: dist.ProcessGroup
    group_name: str
    ep_size: int
    ep_rank: int
    num_experts: int
    max_tokens: int

    @property
    def local_experts(self) -> int:
        return self.num_experts // self.ep_size


def hccl_comm_name(group: dist.ProcessGroup) -> str:
    """The HCCL communicator name of a device process group, as torch_npu offers it: the
    group's `npu` backend is its ProcessGroupHCCL, whose get_hccl_comm_name(rank) names
    the communicator the MC2 ops take as group_ep."""
    backend = group._get_backend(torch.device("npu"))
    name: str = backend.get_hccl_comm_name(dist.get_rank())
    return name


class NpuMoeComm(MoeCommOps):
    """The three EP methods over one layer's local expert weights (w13 [E_local, 2I, H],
    w2 [E_local, H, I], unquantized)."""

    def __init__(
        self, torch_npu: ModuleType, moe_ops: NpuMoeOps, quant_ops: NpuQuantMoeOps | None = None
    ) -> None:
        self._torch_npu = torch_npu
        self._ops = moe_ops
        self._quant_ops = quant_ops
        self._names: dict[int, str] = {}  # id(group) -> its communicator's name

    def domain(self, ep: ExpertParallelGroup) -> EpDomain:
        """The ops' view of the port's EP group (the communicator's name looked up once)."""
        name = self._names.get(id(ep.group))
        if name is None:
            name = self._names[id(ep.group)] = hccl_comm_name(ep.group)
        return EpDomain(ep.group, name, ep.size, ep.rank, ep.num_experts, ep.max_tokens)

    def ep_experts(
        self,
        method: str,
        hidden: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        ep: ExpertParallelGroup,
        mlp: ExpertMlp = SILU_MLP,
    ) -> torch.Tensor:
        path = {
            MoeCommMethod.MC2: self.mc2,
            MoeCommMethod.ALLTOALL: self.all_to_all,
            MoeCommMethod.ALLGATHER: self.all_gather,
        }[MoeCommMethod(method)]
        return path(hidden, ids, weights, w13, w2, self.domain(ep), mlp)

    def ep_experts_w8a8_dynamic(
        self,
        method: str,
        hidden: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        w13: torch.Tensor,
        w13_scale: torch.Tensor,
        w2: torch.Tensor,
        w2_scale: torch.Tensor,
        ep: ExpertParallelGroup,
    ) -> torch.Tensor:
        return self.w8a8_dynamic(
            method, hidden, ids, weights, w13, w13_scale, w2, w2_scale, self.domain(ep)
        )

    def w8a8_dynamic(
        self,
        method: str,
        hidden: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        w13: torch.Tensor,
        w13_scale: torch.Tensor,
        w2: torch.Tensor,
        w2_scale: torch.Tensor,
        domain: EpDomain,
    ) -> torch.Tensor:
        """ep_experts_w8a8_dynamic over the ops' view of the group."""
        if MoeCommMethod(method) is MoeCommMethod.MC2:
            return self.mc2_w8a8_dynamic(
                hidden, ids, weights, w13, w13_scale, w2, w2_scale, domain
            )
        quant_ops = self._require_quant_ops()
        if MoeCommMethod(method) is MoeCommMethod.ALLTOALL:
            return self._all_to_all(
                hidden, ids, weights, domain, True,
                lambda rows, row_scale, counts: quant_ops.grouped_mlp_w8a8_quantized(
                    rows, row_scale, counts, w13, w13_scale, w2, w2_scale, hidden.dtype
                ),
            )

        def local_experts(x: torch.Tensor, local_ids: torch.Tensor, w: torch.Tensor
                          ) -> torch.Tensor:
            rows, permutation = self._ops.permute(x, local_ids, domain.local_experts)
            out_rows = quant_ops.grouped_mlp_w8a8_dynamic(
                rows, permutation.group_sizes, w13, w13_scale, w2, w2_scale
            )
            return self._ops.unpermute(out_rows, permutation, w)

        return self._all_gather(hidden, ids, weights, domain, local_experts)

    def _require_quant_ops(self) -> NpuQuantMoeOps:
        if self._quant_ops is None:
            raise ValueError("NpuMoeComm's W8A8_DYNAMIC experts need the quantized MoE ops")
        return self._quant_ops

    def run(
        self,
        decision: MoeDecision,
        step_tokens: int,
        hidden: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        domain: EpDomain,
        mlp: ExpertMlp = SILU_MLP,
    ) -> tuple[torch.Tensor, MoeCommMethod]:
        """The method the core chose for a step of `step_tokens` (the most of any DP rank),
        run; returns the outputs and the method."""
        method = decision.comm.for_tokens(step_tokens).method
        path = {
            MoeCommMethod.MC2: self.mc2,
            MoeCommMethod.ALLTOALL: self.all_to_all,
            MoeCommMethod.ALLGATHER: self.all_gather,
        }.get(method)
        if path is None:
            raise NotImplementedError(f"MoE comm method {method.value} is not in the NPU adapter")
        return path(hidden, ids, weights, w13, w2, domain, mlp), method

    def mc2(
        self,
        hidden: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        domain: EpDomain,
        mlp: ExpertMlp = SILU_MLP,
    ) -> torch.Tensor:
        return self._mc2(
            hidden, ids, weights, domain, NO_QUANT,
            lambda rows, _scale, token_nums: self._ops.grouped_mlp(
                rows, token_nums, w13, w2, mlp=mlp
            ),
        )

    def mc2_w8a8_dynamic(
        self,
        hidden: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        w13: torch.Tensor,
        w13_scale: torch.Tensor,
        w2: torch.Tensor,
        w2_scale: torch.Tensor,
        domain: EpDomain,
    ) -> torch.Tensor:
        """MC2 with W8A8_DYNAMIC experts (weights as NpuQuantMoeOps.prepare_weights gives
        them): dispatch quantizes each token per token (quant_mode 2), so int8 rows and
        their float32 scales travel and feed the first grouped matmul directly."""
        quant_ops = self._require_quant_ops()
        return self._mc2(
            hidden, ids, weights, domain, DYNAMIC_INT8,
            lambda rows, row_scale, token_nums: quant_ops.grouped_mlp_w8a8_quantized(
                rows, row_scale, token_nums, w13, w13_scale, w2, w2_scale, hidden.dtype
            ),
        )

    def _mc2(
        self,
        hidden: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        domain: EpDomain,
        quant_mode: int,
        experts: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """Dispatch (quantizing per `quant_mode`), this rank's experts on the rows it
        received (rows, their scales, tokens per expert), combine back to each token."""
        ids32 = ids.to(torch.int32)
        global_bs = domain.max_tokens * domain.ep_size  # ranks may bring fewer tokens
        rows, row_scale, assist, token_nums, recv_counts, _, _ = (
            self._torch_npu.npu_moe_distribute_dispatch_v2(
                hidden,
                ids32,
                domain.group_name,
                domain.ep_size,
                domain.ep_rank,
                domain.num_experts,
                quant_mode=quant_mode,
                expert_token_nums_type=COUNTS,
                global_bs=global_bs,
            )
        )
        out: torch.Tensor = self._torch_npu.npu_moe_distribute_combine_v2(
            experts(rows, row_scale, token_nums),
            ids32,
            assist,
            recv_counts,
            weights.float(),
            domain.group_name,
            domain.ep_size,
            domain.ep_rank,
            domain.num_experts,
            global_bs=global_bs,
        )
        return out

    def all_to_all(
        self,
        hidden: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        domain: EpDomain,
        mlp: ExpertMlp = SILU_MLP,
    ) -> torch.Tensor:
        return self._all_to_all(
            hidden, ids, weights, domain, False,
            lambda rows, _scale, counts: self._ops.grouped_mlp(rows, counts, w13, w2, mlp=mlp),
        )

    def _all_to_all(
        self,
        hidden: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        domain: EpDomain,
        quantized: bool,
        experts: Callable[[torch.Tensor, torch.Tensor | None, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """Rows sorted by global expert, sent to their experts' ranks (int8 with their
        per-token scales when `quantized`), `experts` (rows, their scales or None, rows
        per local expert) on the rows received, sent back and combined."""
        world, local = domain.ep_size, domain.local_experts
        rows, permutation = self._ops.permute(hidden, ids, domain.num_experts)
        per_expert = permutation.group_sizes  # [E] rows per global expert, expert order
        recv_per_expert = torch.empty_like(per_expert)
        dist.all_to_all_single(recv_per_expert, per_expert, group=domain.group)
        send = per_expert.view(world, local).sum(1).tolist()  # the splits: a host read
        received = recv_per_expert.view(world, local)  # [source rank, local expert]
        recv = received.sum(1).tolist()
        payload = rows[: sum(send)].contiguous()
        scale = None
        if quantized and payload.shape[0]:
            payload, scale = self._torch_npu.npu_dynamic_quant(payload, dst_type=torch.int8)
        elif quantized:
            payload = payload.to(torch.int8)
            scale = payload.new_empty(0, dtype=torch.float32)
        inbound = payload.new_empty(sum(recv), rows.shape[1])
        dist.all_to_all_single(inbound, payload, recv, send, group=domain.group)
        inbound_scale = None
        if scale is not None:
            inbound_scale = scale.new_empty(sum(recv))
            dist.all_to_all_single(inbound_scale, scale.contiguous(), recv, send,
                                   group=domain.group)
        # Arrived grouped by (source rank, local expert): regroup by local expert.
        expert_of_row = torch.repeat_interleave(
            torch.arange(local, device=rows.device).repeat(world), received.reshape(-1)
        )
        order = torch.sort(expert_of_row, stable=True).indices
        if inbound.shape[0]:
            out_rows = experts(
                inbound[order],
                None if inbound_scale is None else inbound_scale[order],
                received.sum(0),
            )
        else:
            out_rows = rows.new_zeros(0, rows.shape[1])
        back = torch.empty_like(out_rows).index_copy_(0, order, out_rows)
        returned = rows.new_empty(sum(send), rows.shape[1])
        dist.all_to_all_single(returned, back, send, recv, group=domain.group)
        return self._ops.unpermute(returned, permutation, weights)

    def all_gather(
        self,
        hidden: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        domain: EpDomain,
        mlp: ExpertMlp = SILU_MLP,
    ) -> torch.Tensor:
        return self._all_gather(
            hidden, ids, weights, domain,
            lambda x, local_ids, w: self._ops.experts(x, local_ids, w, w13, w2, mlp=mlp),
        )

    def _all_gather(
        self,
        hidden: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        domain: EpDomain,
        experts: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """Every rank's tokens gathered, `experts` (tokens, local ids with -1 for other
        ranks' experts, weights) run on them, the partial sums all-reduced."""
        world, local = domain.ep_size, domain.local_experts
        counts = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(counts, torch.tensor([hidden.shape[0]]), group=domain.group)
        sizes = [int(c.item()) for c in counts]  # a host read
        most = max(sizes)

        def gathered(t: torch.Tensor) -> torch.Tensor:
            padded = t.new_zeros(most, *t.shape[1:])
            padded[: t.shape[0]] = t
            parts = [torch.empty_like(padded) for _ in range(world)]
            dist.all_gather(parts, padded, group=domain.group)
            return torch.cat([p[:n] for p, n in zip(parts, sizes, strict=True)])

        all_ids = gathered(ids.long())
        first = domain.ep_rank * local
        mine = (all_ids >= first) & (all_ids < first + local)
        local_ids = torch.where(mine, all_ids - first, -1)
        partial = experts(gathered(hidden), local_ids, gathered(weights.float())).float()
        dist.all_reduce(partial, group=domain.group)
        start = sum(sizes[: domain.ep_rank])
        return partial[start : start + hidden.shape[0]].to(hidden.dtype)
