"""The plan's MoE step: the method for the deployment's step sizes, the experts each rank
holds, MC2's HCCL buffer against HCCL_BUFFSIZE, refused before any weight loads."""

from __future__ import annotations

from typing import Any

from ascend_core.deployment import BatchSettings, CompileMode, GraphMode
from ascend_core.errors import ConfigError, EnvironmentVariableError
from ascend_core.moe import MoeCommMethod, mc2_buffer_mb, place_experts
from ascend_core.plan import plan_config
from ports.device import ChipFamily
from unit.core.plan_fixtures import dense_model, mla_model, npu

MC2, ALLTOALL, ALLGATHER = MoeCommMethod.MC2, MoeCommMethod.ALLTOALL, MoeCommMethod.ALLGATHER


def deepseek(chip: ChipFamily = ChipFamily.A3, *, tp: int = 1, dp: int = 16, **top: Any):
    """DeepSeek-V3's MoE (256 experts, top-8) with DP x TP EP ranks, 32 sequences of one
    token, eager (decode steps of max_num_seqs tokens), 4096 tokens a step."""
    top.setdefault("batch", BatchSettings(max_num_seqs=32, max_num_batched_tokens=4096))
    top.setdefault("compilation", {"enforce_eager": True})
    return npu(
        mla_model(num_experts=256, experts_per_token=8),
        chip=chip,
        parallel={"tp": tp, "dp": dp, "expert_parallel": True},
        **top,
    )


def test_a3_plans_mc2_for_decode_steps_and_all_to_all_above():
    plan = plan_config(deepseek(outside_env={"HCCL_BUFFSIZE": "512"}))
    moe = plan.decisions.moe
    assert plan.ok, plan.describe()
    assert moe is not None and moe.comm.capacity == 32
    assert moe.comm.methods() == (MC2, ALLTOALL)
    assert moe.placement.most_per_rank == 16


def test_graphs_size_the_capacity_from_the_largest_capture_size():
    # TP 4 (32 MLA heads a device), no DP: the NPU captures graphs.
    deployment = deepseek(
        tp=4,
        dp=1,
        outside_env={"HCCL_BUFFSIZE": "2048"},
        compilation={
            "mode": CompileMode.VLLM_COMPILE,
            "graph_mode": GraphMode.FULL_DECODE_ONLY,
            "capture_sizes": (8, 48),
        },
    )
    plan = plan_config(deployment)
    assert plan.decisions.graph_mode is GraphMode.FULL_DECODE_ONLY
    assert plan.decisions.moe is not None and plan.decisions.moe.comm.capacity == 48


def test_the_mc2_buffer_follows_canns_a3_formula():
    # 2 x (16 experts x 32 tokens x 16 ranks x Align512(Align32(2 x 7168) + 64)
    #      + (8 + 1) x 32 x Align512(2 x 7168)) = 251,527,168 bytes -> 240 MB
    needed = mc2_buffer_mb(
        ChipFamily.A3,
        tokens_per_rank=32,
        ep_size=16,
        experts_per_rank=16,
        hidden_size=7168,
        top_k=8,
        num_experts=256,
    )
    assert needed == 240


def test_the_mc2_buffer_on_a2_fullmesh_and_hierarchy():
    # fullmesh: 2 x (32 x 16 x min(16, 8) x 7168 x 2 + 2 MB) -> 116 MB
    args = dict(
        tokens_per_rank=32,
        ep_size=16,
        experts_per_rank=16,
        hidden_size=7168,
        top_k=8,
        num_experts=256,
    )
    assert mc2_buffer_mb(ChipFamily.A2, **args) == 116
    # hierarchy: 256 x 32 x (7168 x 2 + 4 x 8 x 4) + 104 MB -> 217 MB
    assert mc2_buffer_mb(ChipFamily.A2, hierarchy=True, **args) == 217


def test_an_hccl_buffer_mc2_cannot_fit_is_refused_before_weights_load():
    plan = plan_config(deepseek())
    errors = [e for e in plan.errors if "HCCL buffer" in str(e)]
    assert len(errors) == 1 and isinstance(errors[0], ConfigError)
    assert "240 MB" in str(errors[0]) and "200 MB" in str(errors[0])
    assert "export HCCL_BUFFSIZE=240" in errors[0].hint
    moe = plan.decisions.moe
    assert moe is not None and moe.hccl_buffer is not None and not moe.hccl_buffer.fits


def test_a_bad_hccl_buffsize_is_an_error_naming_it():
    plan = plan_config(deepseek(outside_env={"HCCL_BUFFSIZE": "lots"}))
    assert any(
        isinstance(e, EnvironmentVariableError) and "HCCL_BUFFSIZE" in str(e) for e in plan.errors
    )


def test_all_to_all_needs_no_hccl_buffer_floor():
    plan = plan_config(deepseek(ascend_env={"VLLM_ASCEND_MOE_COMM_METHOD": "alltoall"}))
    assert plan.ok, plan.describe()
    moe = plan.decisions.moe
    assert moe is not None and moe.comm.forced and moe.hccl_buffer is None


def test_a_forced_method_that_cannot_serve_is_refused():
    plan = plan_config(deepseek(ascend_env={"VLLM_ASCEND_MOE_COMM_METHOD": "mc2"}))
    assert any("VLLM_ASCEND_MOE_COMM_METHOD=mc2 cannot serve" in str(e) for e in plan.errors)


def test_a_bad_forced_method_is_an_env_error():
    plan = plan_config(deepseek(ascend_env={"VLLM_ASCEND_MOE_COMM_METHOD": "nccl"}))
    assert any("VLLM_ASCEND_MOE_COMM_METHOD" in str(e) for e in plan.errors)


def test_fused_mc2_on_a3_is_refused_this_build_has_no_kernel():
    plan = plan_config(
        deepseek(outside_env={"HCCL_BUFFSIZE": "512"}, additional_config={"enable_fused_mc2": 1})
    )
    assert any("dispatch_ffn_combine" in str(e) for e in plan.errors)


def test_fused_mc2_where_the_reference_would_not_use_it_is_no_error():
    plan = plan_config(deepseek(ChipFamily.A2, additional_config={"enable_fused_mc2": 1}))
    assert not any("dispatch_ffn_combine" in str(e) for e in plan.errors)


def test_without_expert_parallelism_the_plan_all_gathers():
    deployment = deepseek()
    deployment = npu(
        deployment.model,
        chip=ChipFamily.A3,
        parallel={"tp": 2},
        batch=BatchSettings(max_num_seqs=32, max_num_batched_tokens=4096),
    )
    moe = plan_config(deployment).decisions.moe
    assert moe is not None and moe.comm.methods() == (ALLGATHER,)
    assert moe.placement.ep_size == 1 and moe.hccl_buffer is None


def test_no_decision_for_dense_models_or_unknown_batch_limits():
    assert plan_config(npu(dense_model(), batch=BatchSettings(8, 64))).decisions.moe is None
    assert plan_config(deepseek(batch=BatchSettings())).decisions.moe is None


def test_redundant_experts_count_on_every_rank():
    plan = plan_config(
        deepseek(
            outside_env={"HCCL_BUFFSIZE": "512"},
            additional_config={"eplb_config": {"dynamic_eplb": True, "num_redundant_experts": 16}},
        )
    )
    moe = plan.decisions.moe
    assert plan.ok, plan.describe()
    assert moe is not None and moe.placement.physical == 272 and moe.placement.most_per_rank == 17
    assert "256 + 16 redundant" in moe.placement.describe()


def test_redundant_experts_that_do_not_split_evenly_are_refused():
    plan = plan_config(
        deepseek(
            outside_env={"HCCL_BUFFSIZE": "512"},
            additional_config={"eplb_config": {"dynamic_eplb": True, "num_redundant_experts": 3}},
        )
    )
    assert any("do not split evenly" in str(e) for e in plan.errors)


def test_placement_without_redundant_experts_may_be_uneven():
    placement, problem = place_experts(10, 0, 4)
    assert problem is None and (placement.fewest_per_rank, placement.most_per_rank) == (2, 3)
    assert place_experts(8, 2, 1)[1] is not None
