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

from typing import TYPE_CHECKING, Any

import torch
from vllm.model_executor.layers.fused_moe.config import FusedMoEConfig, FusedMoEQuantConfig
from vllm.model_executor.layers.fused_moe.fused_moe_method_base import FusedMoEMethodBase
from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import (
    UnquantizedFusedMoEMethod,
)

from adapters.container import container
from ascend_core.errors import UnsupportedFeatureError, refuse_unsupported
from ports.moe import SILU_MLP, ExpertMlp, GateKind, MoeOps, Routing, Scoring

if TYPE_CHECKING:
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

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


def expert_mlp_of(layer: RoutedExperts) -> ExpertMlp:
    """The layer's expert MLP (after routing_of(layer, expert_mlps=True) accepted it).
    vLLM's swigluoai kernels fix alpha 1.702 and limit 7.0 (gpt-oss's config values)."""
    return ExpertMlp(
        gate=GATES[layer.activation.name.lower()], biased=bool(layer.moe_config.has_bias)
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
        expert_map = layer.expert_map
        if expert_map is None:
            local_ids = ids
        else:
            local_ids = expert_map.index_select(0, ids.reshape(-1).long()).view_as(ids)
        return self.routed_experts(layer, x, local_ids, weights)

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

    def maybe_roundup_sizes(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        return FusedMoEMethodBase.maybe_roundup_sizes(self, *args, **kwargs)

    def process_weights_after_loading(self, layer: RoutedExperts) -> None:
        # Refuse what the device's ops cannot run at load time, not at the first request.
        self.routing_rule = routing_of(layer, expert_mlps=True)
        self.expert_mlp = expert_mlp_of(layer)
        dtype = str(layer.moe_config.in_dtype).removeprefix("torch.")
        self.moe_ops.check(self.routing_rule, layer.global_num_experts, dtype, self.expert_mlp)
        # The ops' traceable experts are the SiLU ones without biases (the host's native
        # kernel); gpt-oss's stay one opaque op that the graph calls.
        self.traced_in_graph = self.expert_mlp == SILU_MLP and self.moe_ops.traces_in_graph(
            layer.w13_weight, layer.w2_weight
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
