"""The doctor's `graphs` section: the mode the engine runs, the sizes vLLM captures."""

from __future__ import annotations

from adapters.doctor.plan.graphs import graph_items, serve_max_num_batched_tokens
from adapters.doctor.plan.model import Target
from adapters.doctor.serve_args import ServeArgs
from ascend_core.deployment import CompileMode, GraphMode
from ascend_core.memory_budget import GIB
from ascend_core.plan import plan_config
from ports.device import ChipFamily, DeviceKind
from unit.core.plan_fixtures import npu

A2 = Target(DeviceKind.NPU, ChipFamily.A2, 64 * GIB, 8, "nominal")
EMULATED = Target(DeviceKind.NPU, ChipFamily.A2, 4 * GIB, 1, "probed")


def test_serve_defaults_the_token_budget_by_device_memory() -> None:
    args = ServeArgs(model="m")
    assert serve_max_num_batched_tokens(args, 4 * GIB) == 2048
    assert serve_max_num_batched_tokens(args, 64 * GIB) == 2048
    assert serve_max_num_batched_tokens(args, 96 * GIB) == 8192
    assert serve_max_num_batched_tokens(args, 192 * GIB) == 16384
    given = ServeArgs(model="m", max_num_batched_tokens=512)
    assert serve_max_num_batched_tokens(given, 192 * GIB) == 512


def test_piecewise_with_unset_sizes_shows_vllms_defaults() -> None:
    piecewise = {"mode": CompileMode.VLLM_COMPILE, "graph_mode": GraphMode.PIECEWISE}
    deployment = npu(compilation=piecewise)
    plan = plan_config(deployment)
    items, data = graph_items(ServeArgs(model="m", max_num_seqs=32), deployment, plan, EMULATED)
    assert data["mode"] == "PIECEWISE"
    assert data["capture_sizes"] == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert [i.name for i in items] == [
        "mode", "captured", "capture sizes", "graph memory", "npugraph_ex"
    ]
    assert data["captured"].startswith("pieces between the attention layers")


def test_given_sizes_are_shown_as_vllm_keeps_them() -> None:
    compilation = {"mode": CompileMode.VLLM_COMPILE, "capture_sizes": (8, 1, 4096, 2)}
    deployment = npu(compilation=compilation)
    _, data = graph_items(ServeArgs(model="m"), deployment, plan_config(deployment), A2)
    assert data["capture_sizes"] == [1, 2, 8]


def test_no_graphs_show_no_sizes() -> None:
    deployment = npu(parallel={"pp": 2}, compilation={"mode": CompileMode.VLLM_COMPILE})
    plan = plan_config(deployment)
    assert plan.graph_mode is GraphMode.NONE  # no graphs under pipeline parallelism yet
    items, data = graph_items(ServeArgs(model="m", pp=2), deployment, plan, A2)
    assert data["mode"] == "NONE" and data["capture_sizes"] == []
    assert [i.name for i in items] == ["mode", "npugraph_ex"]


def test_speculative_full_decode_graphs_show_the_sizes_vllm_captures() -> None:
    """vLLM's sizes for 1 + k tokens a request, rounded to whole verify batches."""
    eagle3 = {"method": "eagle3", "num_speculative_tokens": 3}
    deployment = npu(compilation={"mode": CompileMode.VLLM_COMPILE}, speculative=eagle3)
    plan = plan_config(deployment)
    args = ServeArgs(model="m", max_num_seqs=8, max_num_batched_tokens=64, speculative=eagle3)
    items, data = graph_items(args, deployment, plan, A2)
    assert data["mode"] == "FULL_DECODE_ONLY"
    assert data["capture_sizes"] == [4, 8, 16, 24, 32, 40, 48, 56, 64]
    sizes = next(i for i in items if i.name == "capture sizes")
    assert "whole verify batches" in sizes.detail
    assert data["captured"].startswith("each uniform verify step (1 + 3 tokens a request)")
    assert "the drafter's forwards run compiled without graphs" in data["captured"]


def test_an_mla_moe_model_is_captured_whole_per_decode_step_and_the_section_says_what() -> None:
    from unit.core.plan_fixtures import mla_model

    deployment = npu(mla_model(is_moe=True), compilation={"mode": CompileMode.VLLM_COMPILE})
    plan = plan_config(deployment)
    items, data = graph_items(ServeArgs(model="m"), deployment, plan, A2)
    assert data["mode"] == "FULL_DECODE_ONLY"
    what = next(i for i in items if i.name == "captured").detail
    assert what == data["captured"]
    assert "MLA latent decode inside" in what and "MoE layers too" in what
    assert what.endswith("other steps run compiled without graphs")


def test_data_parallel_shows_whether_graphs_stay_and_why() -> None:
    """DP x EP at TP 1 a DP rank keeps the graphs; a dense model under DP does not."""
    from ascend_core.deployment import BatchSettings
    from unit.core.plan_fixtures import dense_model

    moe = dense_model(is_moe=True, num_experts=8, experts_per_token=2)
    batch = BatchSettings(max_num_seqs=8, max_num_batched_tokens=64)
    args = ServeArgs(model="m", max_num_seqs=8, max_num_batched_tokens=64, dp=2)
    a3 = Target(DeviceKind.NPU, ChipFamily.A3, 64 * GIB, 8, "nominal")
    kept = npu(moe, chip=ChipFamily.A3, batch=batch,
               parallel={"dp": 2, "expert_parallel": True})
    items, data = graph_items(args, kept, plan_config(kept), a3)
    assert data["mode"] == "FULL_AND_PIECEWISE"
    assert data["data_parallel"].startswith("data parallel 2 with expert parallelism")
    assert next(i for i in items if i.name == "data parallel").detail == data["data_parallel"]
    dense = npu(chip=ChipFamily.A3, batch=batch, parallel={"dp": 2})
    _, data = graph_items(args, dense, plan_config(dense), a3)
    assert data["mode"] == "NONE" and "(a dense model) is not" in data["data_parallel"]
