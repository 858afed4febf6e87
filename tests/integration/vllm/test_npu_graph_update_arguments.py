"""What a FULL NPU graph's replay gives the update: each layer's attention launches' host
arguments, in the forward context's layer order, each metadata asking the ops port its
builder handed it, once per step's metadata (the layers of a KV cache group share one)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from adapters.container import container
from adapters.cpu.ops import CpuOps
from adapters.torch.attention_plan import build_attention_plan
from adapters.vllm.attention.metadata import PagedMetadata, PagedMetadataBuilder
from adapters.vllm.attention.mla_metadata import MlaMetadata, MlaMetadataBuilder
from adapters.vllm.attention.sparse_mla import SparseMlaMetadata
from adapters.vllm.worker.npu_model_runner import graph_update_arguments
from ports.ops import AttentionPlan


class _ArgumentOps:
    """The one method of the ops port this asks, recording the plans it was asked for."""

    def __init__(self) -> None:
        self.asked: list[AttentionPlan] = []

    def graph_host_arguments(self, plan: AttentionPlan) -> list[dict[str, Any]]:
        self.asked.append(plan)
        return [{"actual_seq_lengths_kv": list(part.actual_seq_lens)} for part in plan.parts]


def _plan(lens: list[int]) -> AttentionPlan:
    n = len(lens)
    return build_attention_plan(
        torch.arange(n + 1, dtype=torch.int32),
        torch.tensor(lens, dtype=torch.int32),
        torch.zeros(n, 1, dtype=torch.int32),
        slot_mapping=torch.arange(n),
    )


def _metadata(lens: list[int], ops: _ArgumentOps) -> PagedMetadata:
    plan = _plan(lens)
    assert plan.slot_mapping is not None
    return PagedMetadata(plan=plan, slot_mapping=plan.slot_mapping, ops=ops)  # type: ignore[arg-type]


def _mla(lens: list[int], ops: _ArgumentOps) -> MlaMetadata:
    plan = _plan(lens)
    assert plan.slot_mapping is not None
    n = len(lens)
    return MlaMetadata(num_actual_tokens=n, num_decodes=n, num_decode_tokens=n,
                       num_prefills=0, slot_mapping=plan.slot_mapping, plan=plan,
                       ops=ops)  # type: ignore[arg-type]


def test_each_layer_gets_its_plans_arguments_in_layer_order() -> None:
    ops = _ArgumentOps()
    shared, other = _metadata([5, 9], ops), _metadata([3], ops)
    layers = {"layers.0.attn": shared, "layers.1.attn": shared, "layers.2.attn": other}
    arguments = graph_update_arguments(layers, frozenset(layers))
    assert arguments == [
        {"actual_seq_lengths_kv": [5, 9]},
        {"actual_seq_lengths_kv": [5, 9]},
        {"actual_seq_lengths_kv": [3]},
    ]
    assert ops.asked == [shared.plan, other.plan]  # once per plan, not per layer


def test_mla_layers_ask_the_mla_ops_and_dense_layers_the_paged_ops() -> None:
    """A model with both kinds of layer (each KV cache group its plan): each layer's
    metadata asks the ops port its backend's builder was handed, in layer order."""
    ops, mla_ops = _ArgumentOps(), _ArgumentOps()
    mla, dense = _mla([4, 0], mla_ops), _metadata([6], ops)
    layers = {"layers.0.attn": mla, "layers.1.attn": dense, "layers.2.attn": mla}
    arguments = graph_update_arguments(layers, frozenset(layers))
    assert arguments == [
        {"actual_seq_lengths_kv": [4, 0]},
        {"actual_seq_lengths_kv": [6]},
        {"actual_seq_lengths_kv": [4, 0]},
    ]
    assert (mla_ops.asked, ops.asked) == ([mla.plan], [dense.plan])


def test_a_drafters_layers_in_the_same_metadata_are_left_out() -> None:
    """MTP and EAGLE drafters' layers share the target's KV cache group, so the step's
    metadata names them too; they run outside the target's graph, which updates only
    the launches it captured."""
    plan = _mla([7, 8], _ArgumentOps())
    layers = {"model.layers.0.attn": plan, "model.layers.1.attn": plan,
              "model.layers.2.attn": plan}  # the last: the MTP layer
    arguments = graph_update_arguments(layers, frozenset(list(layers)[:2]))
    assert arguments == [{"actual_seq_lengths_kv": [7, 8]}] * 2


def _sparse() -> SparseMlaMetadata:
    plan = _plan([3])
    assert plan.slot_mapping is not None
    return SparseMlaMetadata(num_actual_tokens=1, num_decodes=1, num_decode_tokens=1,
                             num_prefills=0, slot_mapping=plan.slot_mapping, plan=plan)


@pytest.mark.parametrize(
    ("metadata", "named"),
    [
        ([{}], "micro-batching"),
        ({"layers.0.attn": object()}, "PIECEWISE"),
    ],
    ids=["micro-batches", "attention it cannot update"],
)
def test_what_a_full_graph_cannot_update_is_refused_naming_the_fix(
    metadata: Any, named: str
) -> None:
    with pytest.raises(RuntimeError, match=named):
        graph_update_arguments(metadata, frozenset({"layers.0.attn"}))


def test_sparse_attention_replays_as_captured_with_no_host_arguments() -> None:
    """DSA's FULL decode graphs: the sparse ops take every length as a device tensor in
    the builder's persistent buffers, so a step updates no launch; a paged layer beside it
    still gets its own."""
    ops = _ArgumentOps()
    sparse, dense = _sparse(), _metadata([6], ops)
    layers = {"layers.0.attn": sparse, "layers.1.attn": dense, "layers.2.attn": sparse}
    assert graph_update_arguments(layers, frozenset(layers)) == [
        {"actual_seq_lengths_kv": [6]}]


class _PlanOps(CpuOps):
    """The host's ops (their plan needs), recording what a graph update asks."""

    def __init__(self) -> None:
        self.asked: list[AttentionPlan] = []

    def graph_host_arguments(self, plan: AttentionPlan) -> list[dict[str, Any]]:
        self.asked.append(plan)
        return [{"tokens": plan.num_actual_tokens}]


def _decode_step() -> Any:
    from vllm.v1.attention.backend import CommonAttentionMetadata

    i32 = torch.int32
    return CommonAttentionMetadata(
        query_start_loc=torch.tensor([0, 1, 2], dtype=i32),
        query_start_loc_cpu=torch.tensor([0, 1, 2], dtype=i32),
        seq_lens=torch.tensor([3, 5], dtype=i32),
        num_reqs=2, num_actual_tokens=2, max_query_len=1, max_seq_len=5,
        block_table_tensor=torch.tensor([[1], [2]], dtype=i32),
        slot_mapping=torch.tensor([18, 36]),
    )


def test_the_builders_hand_the_ops_they_were_built_with_to_each_steps_metadata() -> None:
    """vLLM constructs the builders (their one point of asking the container); each step's
    metadata asks the ops its builder holds, whatever the container serves later."""
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    config = VllmConfig()
    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8, dtype=torch.float32)
    cpu = torch.device("cpu")
    given, served = _PlanOps(), _PlanOps()
    paged = PagedMetadataBuilder(spec, ["l0"], config, cpu, ops=given).build(0, _decode_step())
    with container().mla_ops.override(served):
        mla = MlaMetadataBuilder(spec, ["l0"], config, cpu)
    step = mla.build(0, _decode_step())
    assert paged.graph_host_arguments() == step.graph_host_arguments() == [{"tokens": 2}]
    assert (given.asked, served.asked) == ([paged.plan], [step.plan])
    assert PagedMetadataBuilder(spec, ["l0"], config, cpu).ops is container().ops()
