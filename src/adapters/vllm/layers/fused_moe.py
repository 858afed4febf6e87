"""vLLM's FusedMoE on our devices: a monolithic MoE method whose math goes through MoeOps.

vLLM 0.33 builds each MoE layer as a runner (router, shared experts, all-reduce) around
`RoutedExperts`, which holds the expert weights and asks its quant method to compute.
A method is *monolithic* when it takes router logits and routes itself, *modular* when
vLLM's router picks experts first. Ours is monolithic, so routing runs on the device's
ops too. `AscendMoeMethod` is the seam a quantized method plugs into: it keeps routing,
permutation and the combine, and asks its subclass only for `run_experts`; the
unquantized method hands the three to `MoeOps.experts` at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from vllm.model_executor.layers.fused_moe.config import FusedMoEConfig, FusedMoEQuantConfig
from vllm.model_executor.layers.fused_moe.fused_moe_method_base import FusedMoEMethodBase
from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import (
    UnquantizedFusedMoEMethod,
)

from adapters.container import container
from adapters.vllm.layers.eplb import eplb_state_of, physical_ids
from ascend_core.errors import UnsupportedFeatureError, refuse_unsupported
from ascend_core.moe.exchange_share import exchange_share
from ascend_core.moe.in_graphs import captures
from ports.moe import SILU_MLP, ExpertMlp, GateKind, MoeOps, Routing, Scoring
from ports.moe_comm import ExpertParallelGroup, MoeCommOps

if TYPE_CHECKING:
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    from ascend_core.moe.decision import MoeDecision

logger = logging.getLogger("vllm.plugins.ascend")

SCORINGS = {"softmax": Scoring.SOFTMAX, "sigmoid": Scoring.SIGMOID}


# vLLM's activation names our unquantized experts compute (MoeOps' GateKind).
GATES = {"silu": GateKind.SILU, "swigluoai": GateKind.SWIGLU_OAI}


def routing_of(layer: RoutedExperts, expert_mlps: bool = False) -> Routing:
    """The layer's routing rule, or a refusal naming what our MoE ops do not do.

    expert_mlps: the caller's experts also take gpt-oss's gate (swigluoai) and expert
    biases (the unquantized method); else SiLU experts without biases only.
    """
    gates = GATES if expert_mlps else {"silu": GateKind.SILU}
    unsupported = {
        f"scoring_func={layer.scoring_func!r}": layer.scoring_func not in SCORINGS,
        "custom_routing_function": layer.custom_routing_function is not None,
        "apply_router_weight_on_input": bool(layer.apply_router_weight_on_input),
        f"activation={layer.activation}": layer.activation.name.lower() not in gates,
        "expert biases": bool(layer.moe_config.has_bias) and not expert_mlps,
    }
    refuse_unsupported(
        unsupported,
        f"MoE layer {layer.layer_name}: the Ascend MoE ops do not support",
        "serve a model whose experts use softmax or sigmoid routing with SiLU experts "
        "(unquantized experts also take gpt-oss's swigluoai gate and biases)",
        UnsupportedFeatureError,
    )
    return Routing(
        top_k=layer.top_k,
        scoring=SCORINGS[layer.scoring_func],
        renormalize=bool(layer.renormalize),
        num_expert_group=layer.num_expert_group if layer.use_grouped_topk else None,
        topk_group=layer.topk_group if layer.use_grouped_topk else None,
        routed_scaling_factor=float(layer.routed_scaling_factor),
    )


def routed_num_experts(layer: RoutedExperts) -> int:
    """The experts the router chooses among: vLLM's logical ones. With EPLB the layer's
    global_num_experts counts the physical ones (logical + redundant replicas), which a
    token reaches only after routing, through the logical -> physical map."""
    return int(layer.moe_config.num_logical_experts or layer.global_num_experts)


def expert_mlp_of(layer: RoutedExperts) -> ExpertMlp:
    """The layer's expert MLP (after routing_of(layer, expert_mlps=True) accepted it).
    vLLM's swigluoai kernels fix alpha 1.702 and limit 7.0 (gpt-oss's config values)."""
    return ExpertMlp(
        gate=GATES[layer.activation.name.lower()], biased=bool(layer.moe_config.has_bias)
    )


class ExpertExchange:
    """A layer's expert parallelism through the device's MoeCommOps. The ranks of a TP
    group split its step's tokens (each brings ceil(T / TP), the last rows padded) and
    return their rows with zeros elsewhere, which vLLM's TP all-reduce after the layer
    joins; DP ranks bring their own tokens (DP attention: vLLM's naive dispatch is a
    no-op on our communicator), the method and MC2's global_bs taken from the most tokens
    of any DP rank (ascend_core/moe/exchange_share.py). Shapes follow the step's (padded)
    token counts only and nothing is read back here, so MC2's exchange is recorded in an
    NPU graph capture and each replay runs it again."""

    def __init__(self, comm: MoeCommOps, decision: MoeDecision, group: Any, rank: int,
                 size: int, num_experts: int, tp: tuple[int, int] | None = None,
                 dp_size: int = 1) -> None:
        self.comm, self.decision = comm, decision
        self.group, self.rank, self.size, self.num_experts = group, rank, size, num_experts
        # (TP size, TP rank); with DP 1 the TP group is the EP group.
        self.tp_size, self.tp_rank = tp if tp is not None else (size, rank)
        self.dp_size = dp_size

    def method_for(self, tokens: int) -> str:
        return self.decision.comm.for_tokens(tokens).method.value

    def serves(self, tokens: int) -> bool:
        """Whether a step of `tokens` exchanges: every eager step; a step vLLM captures in
        an NPU graph only by a method that reads nothing back (MC2). Otherwise each rank's
        experts run on all its tokens and vLLM's all-reduce adds the partial sums, which
        a capture records (ascend_core/moe/in_graphs.py). Under DP every step exchanges
        (the plan refuses captured steps without MC2: moe_comm.dp_capture_refusal)."""
        from vllm.config import CUDAGraphMode
        from vllm.forward_context import get_forward_context, is_forward_context_available

        if self.dp_size > 1 or not is_forward_context_available():
            return True
        if get_forward_context().cudagraph_runtime_mode == CUDAGraphMode.NONE:
            return True
        return captures(self.decision.comm.for_tokens(tokens).method)

    def _dp_tokens(self) -> tuple[int, ...]:
        """Every DP rank's tokens this step (a host tensor vLLM's runner made); ()
        with DP 1 or outside a forward."""
        from vllm.forward_context import get_forward_context, is_forward_context_available

        if self.dp_size == 1 or not is_forward_context_available():
            return ()
        meta = get_forward_context().dp_metadata
        return () if meta is None else tuple(meta.num_tokens_across_dp_cpu.tolist())

    def __call__(
        self,
        x: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        mlp: ExpertMlp,
    ) -> torch.Tensor:
        return self.exchange(
            x, ids, weights,
            lambda method, xs, i, w, ep: self.comm.ep_experts(method, xs, i, w, w13, w2, ep, mlp),
        )

    def exchange(
        self,
        x: torch.Tensor,
        ids: torch.Tensor,
        weights: torch.Tensor,
        experts: Callable[
            [str, torch.Tensor, torch.Tensor, torch.Tensor, ExpertParallelGroup], torch.Tensor
        ],
    ) -> torch.Tensor:
        """The step's tokens split over the ranks, `experts` (method, this rank's tokens,
        their ids and weights, the group) on this rank's share: one of self.comm's exchanges
        over the layer's weights (the unquantized ones in __call__)."""
        tokens = x.shape[0]
        share = exchange_share(tokens, self.tp_size, self.tp_rank, self._dp_tokens())
        if share.padded != tokens:  # padding tokens: expert 0 at weight 0, rows dropped
            extra = share.padded - tokens
            x = torch.cat([x, x.new_zeros(extra, x.shape[1])])
            ids = torch.cat([ids, ids.new_zeros(extra, ids.shape[1])])
            weights = torch.cat([weights, weights.new_zeros(extra, weights.shape[1])])
        mine = slice(share.start, share.start + share.count)
        ep = ExpertParallelGroup(
            self.group, self.size, self.rank, self.num_experts, share.max_tokens
        )
        rows = experts(self.method_for(share.step_tokens), x[mine], ids[mine], weights[mine], ep)
        if self.tp_size == 1:
            return rows[:tokens]
        out = x.new_zeros(x.shape)
        out[mine] = rows
        return out[:tokens]


def expert_exchange_of(layer: RoutedExperts) -> ExpertExchange | None:
    """The layer's exchange where the device has MoeCommOps, the layer's experts are split
    over EP ranks and the plan decided the method; else None (the experts this rank holds
    run, and vLLM's all-reduce adds the ranks' partial sums: the host's EP)."""
    if layer.expert_map is None:
        return None
    comm = container().moe_comm_ops()
    if comm is None:
        return None
    from vllm.config import get_current_vllm_config
    from vllm.distributed import get_dp_group, get_ep_group, get_tp_group

    from adapters.vllm.engine.configure import moe_decision_of

    config = get_current_vllm_config()
    decision = moe_decision_of(config)
    dp_size = get_dp_group().world_size
    if decision is None and dp_size > 1:
        raise UnsupportedFeatureError(
            f"MoE layer {layer.layer_name}: expert parallelism with data parallel "
            f"{dp_size} on the NPU needs the plan's MoE communication method, and the "
            "plan decided none (the batch limits were unknown to it).",
            "serve with --max-num-seqs and --max-num-batched-tokens given",
        )
    if decision is None:
        return None
    if decision.in_graphs is not None:
        logger.info("MoE layer %s: %s", layer.layer_name, decision.in_graphs)
    group, tp = get_ep_group(), get_tp_group()
    return ExpertExchange(
        comm, decision, group.device_group, group.rank_in_group, group.world_size,
        layer.global_num_experts, (tp.world_size, tp.rank_in_group), dp_size,
    )


class AscendMoeMethod(FusedMoEMethodBase):
    """Routing, permutation and combine through MoeOps; the experts left to subclasses.

    Expert parallel: `layer.expert_map` maps global expert ids to this rank's slots
    (-1 elsewhere); slots of other ranks' experts are dropped, and the runner's
    all-reduce adds the ranks' partial sums.
    """

    moe_ops: MoeOps
    routing_rule: Routing | None = None
    expert_mlp: ExpertMlp = SILU_MLP
    # Set at load where the device's ops say a compiled graph can trace this layer's
    # route and experts (MoeOps.traces_in_graph); the host's MoE entry patch then calls
    # the runner directly instead of through vLLM's opaque moe_forward op.
    traced_in_graph: bool = False
    # Set at load where the device exchanges tokens between EP ranks (MC2, all-to-all).
    exchange: ExpertExchange | None = None
    # vLLM's EplbLayerState with --enable-eplb (layers/eplb.py): routed ids become physical.
    eplb: Any = None

    def __init__(self, moe: FusedMoEConfig) -> None:
        # FusedMoEMethodBase by name: in a subclass that also derives from one of vLLM's
        # methods, super() would run that method's kernel selection.
        FusedMoEMethodBase.__init__(self, moe)
        self.moe_ops = container().moe_ops()

    @property
    def is_monolithic(self) -> bool:
        return True

    @property
    def supports_eplb(self) -> bool:
        return False

    def get_fused_moe_quant_config(self, layer: RoutedExperts) -> FusedMoEQuantConfig | None:
        return None  # no vLLM kernel reads it: the math is ours

    def apply(self, layer: RoutedExperts, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise AssertionError("a monolithic MoE method is called through apply_monolithic")

    def apply_monolithic(
        self,
        layer: RoutedExperts,
        x: torch.Tensor,
        router_logits: torch.Tensor,
        input_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        ops = self.moe_ops
        if self.routing_rule is None:
            self.routing_rule = routing_of(layer)
        weights, ids = ops.route(router_logits, self.routing_rule, layer.e_score_correction_bias)
        if self.eplb is not None:
            ids = physical_ids(self.eplb, ids)
        if self.exchange is not None and self.exchange.serves(x.shape[0]):
            return self.exchanged(layer, self.exchange, x, ids, weights)
        expert_map = layer.expert_map
        if expert_map is None:
            local_ids = ids
        else:
            local_ids = expert_map.index_select(0, ids.reshape(-1).long()).view_as(ids)
        return self.routed_experts(layer, x, local_ids, weights)

    def exchanged(
        self, layer: RoutedExperts, exchange: ExpertExchange, x: torch.Tensor,
        ids: torch.Tensor, weights: torch.Tensor,
    ) -> torch.Tensor:
        """[T, H]: x's tokens (global expert ids) through the EP exchange and the layer's
        experts; a quantized method passes its own weights."""
        return exchange(x, ids, weights, layer.w13_weight, layer.w2_weight, self.expert_mlp)

    def routed_experts(
        self, layer: RoutedExperts, x: torch.Tensor, local_ids: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """[T, H]: x's rows permuted to their local experts, run_experts, the combine."""
        ops = self.moe_ops
        rows, permutation = ops.permute(x, local_ids, layer.local_num_experts)
        out_rows = self.run_experts(layer, rows, permutation.group_sizes)
        return ops.unpermute(out_rows, permutation, weights)

    def run_experts(
        self, layer: RoutedExperts, rows: torch.Tensor, group_sizes: torch.Tensor
    ) -> torch.Tensor:
        """rows [N, H] sorted by local expert, group_sizes [E_local] -> expert outputs [N, H]."""
        raise NotImplementedError


class AscendUnquantizedFusedMoEMethod(AscendMoeMethod, UnquantizedFusedMoEMethod):
    """vLLM's unquantized MoE method (its weights, its loader) with our compute.

    Registered with `register_oot` in place of UnquantizedFusedMoEMethod, which on an
    out-of-tree platform selects no kernel at all.
    """

    @property
    def supports_eplb(self) -> bool:
        return True  # vLLM's weights, moved by its rearrange; ids mapped in apply_monolithic

    def maybe_roundup_sizes(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        return FusedMoEMethodBase.maybe_roundup_sizes(self, *args, **kwargs)

    def process_weights_after_loading(self, layer: RoutedExperts) -> None:
        # Refuse what the device's ops cannot run at load time, not at the first request.
        self.routing_rule = routing_of(layer, expert_mlps=True)
        self.expert_mlp = expert_mlp_of(layer)
        dtype = str(layer.moe_config.in_dtype).removeprefix("torch.")
        self.moe_ops.check(self.routing_rule, routed_num_experts(layer), dtype,
                           self.expert_mlp)
        # The ops' traceable experts are the SiLU ones without biases (the host's native
        # kernel); gpt-oss's stay one opaque op that the graph calls.
        self.exchange = expert_exchange_of(layer)
        self.eplb = eplb_state_of(layer)
        if self.exchange is not None and self.expert_mlp.biased:
            raise UnsupportedFeatureError(
                f"MoE layer {layer.layer_name}: the NPU's expert-parallel exchange runs "
                "experts without biases.",
                "serve this model without --enable-expert-parallel",
            )
        # EPLB's map records the load in place: kept inside vLLM's opaque MoE op.
        self.traced_in_graph = (
            self.exchange is None
            and self.eplb is None
            and self.expert_mlp == SILU_MLP
            and self.moe_ops.traces_in_graph(layer.w13_weight, layer.w2_weight)
        )

    def routed_experts(
        self, layer: RoutedExperts, x: torch.Tensor, local_ids: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        # One call for the three steps: the host runs them as one native kernel.
        mlp = self.expert_mlp
        biases = (layer.w13_bias, layer.w2_bias) if mlp.biased else None
        return self.moe_ops.experts(
            x, local_ids, weights, layer.w13_weight, layer.w2_weight, mlp=mlp, biases=biases
        )

    def forward_native(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        raise AssertionError("a monolithic MoE method is called through apply_monolithic")

    forward_oot = forward_native
