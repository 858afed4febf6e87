"""What a FULL NPU graph's replay gives the update: each layer's attention launches' host
arguments, in the forward context's layer order, asked of the ops port once per plan."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from adapters.attention_plan import build_attention_plan
from adapters.container import container
from adapters.vllm.attention.metadata import PagedMetadata
from adapters.vllm.npu_model_runner import _host_arguments
from ports.ops import AttentionPlan


class _ArgumentOps:
    """The one method of the ops port this asks, recording the plans it was asked for."""

    def __init__(self) -> None:
        self.asked: list[AttentionPlan] = []

    def graph_host_arguments(self, plan: AttentionPlan) -> list[dict[str, Any]]:
        self.asked.append(plan)
        return [{"actual_seq_lengths_kv": list(part.actual_seq_lens)} for part in plan.parts]


def _metadata(lens: list[int]) -> PagedMetadata:
    n = len(lens)
    plan = build_attention_plan(
        torch.arange(n + 1, dtype=torch.int32),
        torch.tensor(lens, dtype=torch.int32),
        torch.zeros(n, 1, dtype=torch.int32),
        slot_mapping=torch.arange(n),
    )
    assert plan.slot_mapping is not None
    return PagedMetadata(paged=plan, slot_mapping=plan.slot_mapping)


def test_each_layer_gets_its_plans_arguments_in_layer_order() -> None:
    ops = _ArgumentOps()
    shared, other = _metadata([5, 9]), _metadata([3])
    layers = {"layers.0.attn": shared, "layers.1.attn": shared, "layers.2.attn": other}
    with container().ops.override(ops):
        arguments = _host_arguments(layers)
    assert arguments == [
        {"actual_seq_lengths_kv": [5, 9]},
        {"actual_seq_lengths_kv": [5, 9]},
        {"actual_seq_lengths_kv": [3]},
    ]
    assert ops.asked == [shared.paged, other.paged]  # once per plan, not per layer


@pytest.mark.parametrize(
    ("metadata", "named"),
    [([{}], "micro-batching"), ({"layers.0.attn": object()}, "PIECEWISE")],
    ids=["micro-batches", "attention it cannot update"],
)
def test_what_a_full_graph_cannot_update_is_refused_naming_the_fix(
    metadata: Any, named: str
) -> None:
    with container().ops.override(_ArgumentOps()), pytest.raises(RuntimeError, match=named):
        _host_arguments(metadata)
