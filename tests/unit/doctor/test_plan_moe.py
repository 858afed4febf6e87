"""The doctor's `expert parallelism` section: the method per step size, the experts each
rank holds (with EPLB's redundant ones) and MC2's HCCL buffer against HCCL_BUFFSIZE."""

from __future__ import annotations

from adapters.doctor.plan.config import build_deployment, serve_batch
from adapters.doctor.plan.model import Target
from adapters.doctor.plan.moe import moe_items
from adapters.doctor.serve_args import ServeArgs
from ascend_core.deployment import BatchSettings
from ascend_core.env.mapping import MappingEnvironment
from ascend_core.memory_budget import GIB
from ascend_core.plan import plan_config
from ports.device import ChipFamily, DeviceKind
from unit.core.plan_fixtures import dense_model, mla_model

A3 = Target(DeviceKind.NPU, ChipFamily.A3, 64 * GIB, 16, "nominal")
DEEPSEEK = mla_model(num_experts=256, experts_per_token=8)


def args(**given: object) -> ServeArgs:
    base: dict[str, object] = {
        "model": "m",
        "dp": 16,
        "expert_parallel": True,
        "enforce_eager": True,
        "max_num_seqs": 32,
        "max_num_batched_tokens": 4096,
    }
    return ServeArgs(**{**base, **given})  # type: ignore[arg-type]


def plan_for(serve: ServeArgs, env: dict[str, str]):
    deployment = build_deployment(serve, DEEPSEEK, A3, MappingEnvironment(env))
    return plan_config(deployment)


def test_serve_batch_is_the_given_limits_or_vllms_defaults():
    assert serve_batch(args(), A3) == BatchSettings(32, 4096)
    assert serve_batch(ServeArgs(model="m"), A3) == BatchSettings(256, 2048)


def test_the_section_shows_the_method_experts_and_a_fitting_buffer():
    plan = plan_for(args(), {"HCCL_BUFFSIZE": "512"})
    items, data = moe_items(plan)
    assert plan.ok, plan.describe()
    by_name = {i.name: i for i in items}
    assert by_name["method"].detail.startswith("mc2 for steps of up to 32 tokens")
    assert "16 a rank" in by_name["experts"].detail
    assert "MC2 needs 240 MB; HCCL_BUFFSIZE 512 MB: fits" in by_name["HCCL buffer"].detail
    assert data is not None and data["methods"] == ["mc2", "alltoall"]
    assert data["hccl_buffer_needed_mb"] == 240 and data["hccl_buffsize_mb"] == 512


def test_a_buffer_too_small_fails_the_section_and_the_plan():
    plan = plan_for(args(), {})
    items, _ = moe_items(plan)
    buffer = next(i for i in items if i.name == "HCCL buffer")
    assert buffer.status.name == "FAIL" and "HCCL_BUFFSIZE=240" in buffer.fix
    assert not plan.ok


def test_redundant_experts_are_shown():
    eplb = {"dynamic_eplb": True, "num_redundant_experts": 16}
    serve = args(additional_config={"eplb_config": eplb})
    items, data = moe_items(plan_for(serve, {"HCCL_BUFFSIZE": "512"}))
    assert "272 experts (256 + 16 redundant) over 16 EP ranks: 17 a rank" in [
        i.detail for i in items if i.name == "experts"
    ]
    assert data is not None and data["redundant_experts"] == 16


def test_forced_all_to_all_needs_no_buffer_floor():
    plan = plan_for(args(), {"VLLM_ASCEND_MOE_COMM_METHOD": "alltoall"})
    items, data = moe_items(plan)
    assert plan.ok, plan.describe()
    assert "forced by VLLM_ASCEND_MOE_COMM_METHOD" in items[0].detail
    assert data is not None and data["hccl_buffer_needed_mb"] is None


def test_no_section_for_a_dense_model():
    deployment = build_deployment(
        args(dp=1, expert_parallel=False), dense_model(), A3, MappingEnvironment({})
    )
    assert moe_items(plan_config(deployment)) == ([], None)


def test_with_graphs_the_section_says_what_captured_steps_exchange():
    serve = args(dp=1, tp=2, enforce_eager=False)
    items, data = moe_items(plan_for(serve, {"HCCL_BUFFSIZE": "512"}))
    shown = [i.detail for i in items if i.name == "in graphs"]
    assert len(shown) == 1 and "exchange by mc2 inside the graphs" in shown[0], items
    assert data is not None and data["in_graphs"] == shown[0]
    forced = plan_for(serve, {"HCCL_BUFFSIZE": "512", "VLLM_ASCEND_MOE_COMM_METHOD": "alltoall"})
    items, _ = moe_items(forced)
    assert "alltoall reads its splits on the host" in next(
        i.detail for i in items if i.name == "in graphs"
    )


def test_eager_shows_no_graph_line():
    items, data = moe_items(plan_for(args(), {"HCCL_BUFFSIZE": "512"}))
    assert "in graphs" not in [i.name for i in items]
    assert data is not None and data["in_graphs"] is None
