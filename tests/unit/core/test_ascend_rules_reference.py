"""The reference plugin's rules on additional_config, each reported as a typed ConfigError
with a hint, all in one pass."""

from __future__ import annotations

from typing import Any

import pytest

from ascend_core.ascend_config import AscendConfig, parse_ascend_config
from ascend_core.deployment import Deployment, KvTransferRole
from ascend_core.errors import ConfigError, PlanErrors, UnsupportedFeatureError
from ascend_core.plan import plan_config
from ports.device import ChipFamily
from unit.core.plan_fixtures import dense_model, dsa_model, mla_model, npu

CONSUMER, PRODUCER = KvTransferRole.CONSUMER, KvTransferRole.PRODUCER


def config_errors(raw: dict[str, Any]) -> list[ConfigError]:
    try:
        parse_ascend_config(raw)
    except PlanErrors as problems:
        return [e for e in problems.errors if isinstance(e, ConfigError)]
    except ConfigError as error:
        return [error]
    return []


def plan_errors(deployment: Deployment) -> list[str]:
    """The plan's errors other than the support matrix's refusals (MLA and MoE are refused
    on the NPU by this build, whatever additional_config says)."""
    plan = plan_config(deployment)
    errors = [e for e in plan.errors if not isinstance(e, UnsupportedFeatureError)]
    assert all(isinstance(e, ConfigError) and e.hint for e in errors), errors
    return [e.what for e in errors]


# --- rules between keys (vllm_ascend/ascend_config.py) --------------------------------------


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        # AscendConfig._resolve_dump_config_path: only one of the two.
        ({"dump_config": {}, "dump_config_path": "/d.json"}, ("dump_config", "dump_config_path")),
        # derive_and_validate: fused MC2 with multistream overlap (the reference turns the
        # overlap off silently; refused here).
        (
            {"enable_fused_mc2": 1, "multistream_overlap_shared_expert": True},
            ("enable_fused_mc2=1", "multistream_overlap_shared_expert"),
        ),
        # _validate_mc2_comm_alg: fused MC2 with hierarchical communication.
        ({"enable_fused_mc2": 2, "mc2_comm_alg": "hierarchy"}, ("enable_fused_mc2=2",)),
        ({"enable_fused_mc2": 1, "enable_mc2_hierarchy_comm": True}, ("hierarchical",)),
        # _check_mix_placement.
        ({"mix_placement": True, "enable_shared_expert_dp": True}, ("mix_placement",)),
        # derive_and_validate: profiling chunk vs balance scheduling.
        (
            {
                "scheduler_config": {
                    "profiling_chunk_config": {"enabled": True},
                    "enable_balance_scheduling": True,
                }
            },
            ("profiling_chunk_config", "enable_balance_scheduling"),
        ),
        # derive_and_validate: mlapo_keep_prefill_weights requires enable_mlapo.
        (
            {"mlapo_keep_prefill_weights": True, "enable_mlapo": False},
            ("mlapo_keep_prefill_weights", "enable_mlapo"),
        ),
        # derive_and_validate: reduce sample vs LM-head TP.
        (
            {
                "enable_reduce_sample": True,
                "finegrained_tp_config": {"lmhead_tensor_parallel_size": 2},
            },
            ("enable_reduce_sample", "lmhead_tensor_parallel_size=2"),
        ),
        # derive_and_validate: oproj / embedding TP require the recompute scheduler.
        (
            {"finegrained_tp_config": {"embedding_tensor_parallel_size": 2}},
            ("embedding_tensor_parallel_size=2", "recompute_scheduler_enable"),
        ),
        # DyntraLBConfig._validate_config: end_step after start_step.
        (
            {"scheduler_config": {"dyntra_lb_config": {"start_step": 10, "end_step": 10}}},
            ("end_step=10", "start_step=10"),
        ),
        # derive_and_validate: ft_communication_abort_timeout is 0 or >= 2 (the reference
        # checks it only with fault tolerance on; always here).
        ({"ft_communication_abort_timeout": 1}, ("ft_communication_abort_timeout=1",)),
        # _validate_sparse_c8_kv_offload_compatibility.
        (
            {"sparse_kv_offload_config": {"enabled": True}, "enable_sparse_sfa_c8": True},
            ("enable_sparse_sfa_c8",),
        ),
        # platform.py _check_ascend_config: scheduler extensions that exclude each other.
        (
            {
                "scheduler_config": {
                    "short_request_first_config": {"enabled": True},
                    "batch_job_sched_config": {"enabled": True},
                }
            },
            ("short_request_first_config with batch_job_sched_config",),
        ),
        (
            {
                "scheduler_config": {
                    "dyntra_lb_config": {"enabled": True},
                    "enable_balance_scheduling": True,
                }
            },
            ("dyntra_lb_config with enable_balance_scheduling",),
        ),
    ],
)
def test_reference_rules_between_keys(raw, names):
    (error,) = config_errors(raw)
    for name in names:
        assert name in error.what, error.what
    assert error.hint


def test_each_rule_is_silent_when_only_one_side_is_set():
    for raw in (
        {"dump_config": {}},
        {"enable_fused_mc2": 1},
        {"mc2_comm_alg": "hierarchy"},
        {"mix_placement": True},
        {"mlapo_keep_prefill_weights": True},
        {"enable_reduce_sample": True},
        {"ft_communication_abort_timeout": 2},
        {"scheduler_config": {"dyntra_lb_config": {"start_step": 1, "end_step": -1}}},
    ):
        assert config_errors(raw) == [], raw


def test_several_rule_breaks_are_reported_together():
    errors = config_errors(
        {"dump_config": {}, "dump_config_path": "/d.json", "ft_communication_abort_timeout": 1}
    )
    assert len(errors) == 2


# --- rules against the deployment ------------------------------------------------------------

RECOMPUTE = {"recompute_scheduler_enable": True}


def test_finegrained_tp_is_refused_on_a_dense_model():
    """ascend_config.py FinegrainedTPConfig._validate_preconditions: MoE models only."""
    raw = {"finegrained_tp_config": {"lmhead_tensor_parallel_size": 2}}
    (what,) = plan_errors(npu(dense_model(), parallel={"dp": 2}, additional_config=raw))
    assert "lmhead_tensor_parallel_size=2" in what and "dense" in what


def test_oproj_tp_needs_tp_1_graph_mode_and_a_decode_node():
    """FinegrainedTPConfig._validate_preconditions: oproj needs tensor_parallel_size == 1, no
    enforce_eager, and kv_consumer."""
    raw = {
        "finegrained_tp_config": {"oproj_tensor_parallel_size": 2},
        "scheduler_config": RECOMPUTE,
    }
    whats = plan_errors(
        npu(
            mla_model(),
            parallel={"dp": 4, "tp": 2},
            compilation={"enforce_eager": True},
            additional_config=raw,
        )
    )
    assert any("tensor_parallel_size=1" in w for w in whats)
    assert any("enforce_eager" in w for w in whats)
    assert any("kv_consumer" in w for w in whats)
    ok = npu(mla_model(), parallel={"dp": 4}, kv_transfer_role=CONSUMER, additional_config=raw)
    assert plan_errors(ok) == []


@pytest.mark.parametrize(
    ("model", "role", "expected"),
    [
        (mla_model(), CONSUMER, []),
        (dense_model(), CONSUMER, ["dense MLA"]),
        (dsa_model(), CONSUMER, ["dense MLA"]),
        (dsa_model(compressed_attention=True), CONSUMER, []),  # not SFA-sparse
        (mla_model(), PRODUCER, ["kv_role=kv_producer"]),
        (mla_model(), None, ["no KV transfer"]),
    ],
)
def test_kv_nz_only_for_mla_on_the_decode_node(model, role, expected):
    """ascend_config.py derive_and_validate: enable_kv_nz needs MLA (not sparse) and the D
    node of PD disaggregation."""
    whats = plan_errors(npu(model, kv_transfer_role=role, additional_config={"enable_kv_nz": True}))
    assert len(whats) == len(expected)
    for what, part in zip(whats, expected, strict=True):
        assert part in what


def test_expert_map_path_must_be_json_and_readable():
    """ascend_config.py EplbConfig._validate_config: a .json file that exists and is readable;
    existence comes from the LocalFiles port through Deployment.readable_files."""
    raw = {"eplb_config": {"expert_map_path": "/maps/ep.json"}}
    missing = npu(mla_model(), additional_config=raw, readable_files={"/maps/ep.json": False})
    (what,) = plan_errors(missing)
    assert "/maps/ep.json" in what and "does not exist" in what
    present = npu(mla_model(), additional_config=raw, readable_files={"/maps/ep.json": True})
    assert plan_errors(present) == []
    yaml = {"eplb_config": {"expert_map_path": "/maps/ep.yaml"}}
    (what,) = plan_errors(npu(mla_model(), additional_config=yaml))
    assert "not a .json file" in what


def test_mlapo_keep_prefill_weights_needs_mla():
    raw = {"mlapo_keep_prefill_weights": True}
    (what,) = plan_errors(npu(dense_model(), additional_config=raw))
    assert "does not use MLA" in what
    assert plan_errors(npu(mla_model(), additional_config=raw)) == []


def test_reduce_sample_is_refused_on_a_kv_producer():
    raw = {"enable_reduce_sample": True}
    (what,) = plan_errors(npu(kv_transfer_role=PRODUCER, additional_config=raw))
    assert "KV producer" in what


def test_force_eplb_with_dynamic_eplb_on_moe():
    raw = {"enable_force_eplb": True, "eplb_config": {"dynamic_eplb": True}}
    (what,) = plan_errors(npu(mla_model(), additional_config=raw))
    assert "enable_force_eplb" in what and "dynamic_eplb" in what


def test_profiling_chunk_needs_pipeline_parallelism():
    raw = {"scheduler_config": {"profiling_chunk_config": {"enabled": True}}}
    (what,) = plan_errors(npu(additional_config=raw))
    assert "pipeline_parallel_size=1" in what
    assert plan_errors(npu(parallel={"pp": 2}, additional_config=raw)) == []


def test_xlite_needs_one_speculative_token_and_no_pipeline():
    """ascend_config.py XliteGraphConfig._validate_preconditions."""
    raw = {"xlite_graph_config": {"enabled": True}}
    whats = plan_errors(
        npu(
            parallel={"pp": 2},
            speculative={"method": "mtp", "num_speculative_tokens": 2},
            additional_config=raw,
        )
    )
    assert len(whats) == 2
    assert any("num_speculative_tokens=1" in w for w in whats)


def test_sparse_kv_offload_preconditions():
    """ascend_config.py SparseKVOffloadConfig._validate_preconditions."""
    raw = {"sparse_kv_offload_config": {"enabled": True}}
    whats = plan_errors(npu(dense_model(), parallel={"pp": 2}, additional_config=raw))
    assert any("sparse-attention model" in w for w in whats)
    assert any("pipeline" in w for w in whats)
    assert any("kv_consumer" in w for w in whats)
    assert plan_errors(npu(dsa_model(), kv_transfer_role=CONSUMER, additional_config=raw)) == []
    debug = {"sparse_kv_offload_config": {"enabled": True, "keep_device_kv_cache": True}}
    assert plan_errors(npu(dsa_model(), additional_config=debug)) == []


def test_scheduler_extensions_against_the_kv_role():
    """platform.py _check_ascend_config: balance scheduling only PD-mixed; dyntra_lb only on
    a decode node with DP > 1; recompute scheduler only on a decode node."""
    balance = {"scheduler_config": {"enable_balance_scheduling": True}}
    (what,) = plan_errors(npu(kv_transfer_role=CONSUMER, additional_config=balance))
    assert "enable_balance_scheduling" in what
    dyntra = {"scheduler_config": {"dyntra_lb_config": {"enabled": True}}}
    whats = plan_errors(npu(additional_config=dyntra))
    assert any("kv_consumer" in w for w in whats) and any(
        "data_parallel_size=1" in w for w in whats
    )
    (what,) = plan_errors(npu(additional_config={"scheduler_config": RECOMPUTE}))
    assert "recompute_scheduler_enable" in what


def test_rule_errors_and_key_errors_come_in_one_pass():
    raw = {"enable_kv_nz": True, "enable_kv_nzz": True}
    plan = plan_config(npu(dense_model(), additional_config=raw))
    assert len(plan_errors(npu(dense_model(), additional_config=raw))) == 3
    assert plan.decisions.ascend_config is None  # the unknown key and both kv_nz rules
    raw = {"enable_kv_nz": True, "finegrained_tp_config": {"lmhead_tensor_parallel_size": 2}}
    assert len(plan_errors(npu(dense_model(), parallel={"dp": 2}, additional_config=raw))) == 3


def test_defaults_match_the_reference():
    """vllm_ascend/ascend_config.py: AscendCompilationConfig.enable_npugraph_ex=True,
    AscendConfig.enable_mlapo=True, enable_cpu_binding=True, EplbConfig
    expert_heat_collection_interval=600, algorithm_execution_interval=50."""
    config = AscendConfig()
    assert config.ascend_compilation_config.enable_npugraph_ex is True
    assert config.enable_mlapo is True
    assert config.enable_cpu_binding is True
    assert config.eplb_config.expert_heat_collection_interval == 600
    assert config.eplb_config.algorithm_execution_interval == 50
    assert config.weight_nz_mode == 1


@pytest.mark.parametrize(
    ("alg", "chip", "refused"),
    [
        ("fullmesh_v2", ChipFamily.A3, False),
        ("fullmesh_v2", ChipFamily.A2, True),
        ("hierarchy", ChipFamily.A2, False),
        ("hierarchy", ChipFamily.A5, True),
        ("fullmesh", ChipFamily.A5, False),
    ],
)
def test_mc2_comm_alg_against_the_chip(alg, chip, refused):
    """ascend_config.py _validate_mc2_comm_alg with device/hardware_profile.py: fullmesh_v2
    needs MC2_FULLMESH_V2_COMM (A3), hierarchy needs MC2_HIERARCHY_COMM (A2/A3)."""
    whats = plan_errors(npu(chip=chip, additional_config={"mc2_comm_alg": alg}))
    assert bool(whats) is refused


def test_sparse_offload_buffer_must_hold_the_models_topk():
    """SparseKVOffloadConfig._validate_preconditions: topk_buffer_size >= index_topk."""
    raw = {"sparse_kv_offload_config": {"enabled": True, "topk_buffer_size": 1024}}
    (what,) = plan_errors(npu(dsa_model(), kv_transfer_role=CONSUMER, additional_config=raw))
    assert "index_topk=2048" in what


@pytest.mark.parametrize(
    "key",
    [
        "enable_balance_scheduling",
        "recompute_scheduler_enable",
        "short_request_first_config",
        "profiling_chunk_config",
        "batch_job_sched_config",
    ],
)
def test_top_level_scheduler_keys_point_at_scheduler_config(key):
    """ascend_config.py SchedulerConfig.from_additional_config still reads these at the top
    level with a deprecation warning; here they are refused with the key to move them to."""
    (error,) = config_errors({key: True})
    assert f"replaced by additional_config.scheduler_config.{key}" in error.what


def test_fused_mc2_is_refused_on_minimax_m3():
    raw = {"enable_fused_mc2": 2}
    model = dense_model(architecture="MiniMaxM3SparseForCausalLM")
    (what,) = plan_errors(npu(model, additional_config=raw))
    assert "enable_fused_mc2=2" in what and "MiniMaxM3" in what
    assert plan_errors(npu(dense_model(), additional_config=raw)) == []
