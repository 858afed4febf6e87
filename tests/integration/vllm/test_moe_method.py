"""Our MoE method's routing rule from a vLLM MoE layer's attributes, and its refusals."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from adapters.vllm.layers.fused_moe import routing_of
from ascend_core.errors import UnsupportedFeatureError
from ports.moe import Routing, Scoring


def _layer(**overrides: Any) -> Any:
    """The RoutedExperts attributes routing_of reads (test_upstream_surface checks them)."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    fields = {
        "layer_name": "model.layers.1.mlp.experts", "top_k": 2, "renormalize": True,
        "use_grouped_topk": True, "num_expert_group": 4, "topk_group": 2,
        "scoring_func": "sigmoid", "routed_scaling_factor": 2.5,
        "custom_routing_function": None, "apply_router_weight_on_input": False,
        "activation": MoEActivation.from_str("silu"),
        "moe_config": SimpleNamespace(has_bias=False),
    }
    return SimpleNamespace(**(fields | overrides))


def test_deepseek_v3_routing() -> None:
    assert routing_of(_layer()) == Routing(
        top_k=2, scoring=Scoring.SIGMOID, renormalize=True, num_expert_group=4, topk_group=2,
        routed_scaling_factor=2.5,
    )


def test_grouping_is_off_unless_the_layer_asks_for_it() -> None:
    routing = routing_of(_layer(use_grouped_topk=False, scoring_func="softmax"))
    assert not routing.grouped and routing.scoring is Scoring.SOFTMAX


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"scoring_func": "sqrtsoftplus"}, "scoring_func='sqrtsoftplus'"),
        ({"custom_routing_function": len}, "custom_routing_function"),
        ({"apply_router_weight_on_input": True}, "apply_router_weight_on_input"),
        ({"moe_config": SimpleNamespace(has_bias=True)}, "expert biases"),
    ],
)
def test_what_the_ops_cannot_run_is_refused_naming_the_layer(
    overrides: dict[str, Any], named: str
) -> None:
    with pytest.raises(UnsupportedFeatureError) as err:
        routing_of(_layer(**overrides))
    assert named in err.value.what and "model.layers.1.mlp.experts" in err.value.what
    assert err.value.hint


def test_gpt_oss_experts_are_taken_by_the_unquantized_method_only() -> None:
    """swigluoai with expert biases: the unquantized method computes them (expert_mlps);
    a quantized method's experts do not, and say so by name."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    from adapters.vllm.layers.fused_moe import expert_mlp_of
    from ports.moe import ExpertMlp, GateKind

    layer = _layer(
        activation=MoEActivation.from_str("swigluoai"),
        moe_config=SimpleNamespace(has_bias=True),
        use_grouped_topk=False, scoring_func="softmax",
    )
    assert routing_of(layer, expert_mlps=True).scoring is Scoring.SOFTMAX
    assert expert_mlp_of(layer) == ExpertMlp(gate=GateKind.SWIGLU_OAI, biased=True)
    with pytest.raises(UnsupportedFeatureError) as err:
        routing_of(layer)
    assert "activation=" in err.value.what and "expert biases" in err.value.what
