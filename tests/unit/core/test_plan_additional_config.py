"""Plan step: additional_config parsed through parse_ascend_config, checked against DP/TP."""

from __future__ import annotations

from ascend_core.ascend_config import AscendConfig
from ascend_core.deployment import CompileMode, GraphMode, KvTransferRole
from ascend_core.errors import AscendError, ConfigError, UnsupportedFeatureError
from ascend_core.plan import ConfigPlan, plan_config
from unit.core.plan_fixtures import host, mla_model, npu

CONSUMER = KvTransferRole.CONSUMER
RECOMPUTE = {"recompute_scheduler_enable": True}


def own_errors(plan: ConfigPlan) -> list[AscendError]:
    """The plan's errors other than the support matrix's (MLA and MoE are refused on the
    NPU by this build, whatever additional_config says)."""
    return [e for e in plan.errors if not isinstance(e, UnsupportedFeatureError)]


FINEGRAINED = "additional_config.finegrained_tp_config"


def test_a_valid_config_is_parsed_into_the_decisions() -> None:
    deployment = npu(
        mla_model(), kv_transfer_role=CONSUMER, additional_config={"enable_kv_nz": True}
    )
    plan = plan_config(deployment)
    assert not own_errors(plan)
    config = plan.decisions.ascend_config
    assert isinstance(config, AscendConfig)
    assert config.enable_kv_nz is True


def test_an_empty_config_gives_the_defaults() -> None:
    assert plan_config(npu()).decisions.ascend_config == AscendConfig()


def test_an_unknown_key_is_an_error_naming_it_and_the_parse_fails_cleanly() -> None:
    plan = plan_config(npu(additional_config={"enable_kv_nzz": True}))
    (error,) = plan.errors
    assert isinstance(error, ConfigError)
    assert "additional_config.enable_kv_nzz" in error.what
    assert "enable_kv_nz" in error.hint
    assert plan.decisions.ascend_config is None


def test_several_problems_are_all_reported() -> None:
    plan = plan_config(npu(additional_config={"enable_kv_nz": "yes", "nonsense": 1}))
    assert len(plan.errors) == 2


def test_finegrained_tp_must_divide_dp() -> None:
    raw = {"finegrained_tp_config": {"lmhead_tensor_parallel_size": 3}}
    plan = plan_config(npu(mla_model(), parallel={"dp": 4}, additional_config=raw))
    (error,) = own_errors(plan)
    assert f"{FINEGRAINED}.lmhead_tensor_parallel_size=3" in error.what
    assert "data_parallel_size=4" in error.what
    assert "1, 2, 4" in error.hint


def test_finegrained_tp_with_plain_tp_is_accepted_when_it_divides_dp() -> None:
    raw = {"finegrained_tp_config": {"lmhead_tensor_parallel_size": 2}}
    plan = plan_config(npu(mla_model(), parallel={"dp": 4, "tp": 2}, additional_config=raw))
    assert not own_errors(plan)


def test_finegrained_tp_fitting_dp_is_accepted() -> None:
    raw = {
        "finegrained_tp_config": {"oproj_tensor_parallel_size": 2},
        "scheduler_config": RECOMPUTE,
    }
    deployment = npu(
        mla_model(), parallel={"dp": 4}, kv_transfer_role=CONSUMER, additional_config=raw
    )
    assert not own_errors(plan_config(deployment))


def test_npugraph_ex_written_true_is_a_warning_in_every_mode() -> None:
    """No graph mode uses npugraph_ex here (the backend is not bound), with graphs or
    without, full or piecewise: a written true is never silently dropped."""
    from ascend_core.plan.npugraph_ex import UNBOUND_REASON

    raw = {"ascend_compilation_config": {"enable_npugraph_ex": True}}
    for compilation in (
        {"enforce_eager": True},
        {"graph_mode": GraphMode.PIECEWISE, "mode": CompileMode.VLLM_COMPILE},
        {"graph_mode": GraphMode.FULL_DECODE_ONLY, "mode": CompileMode.VLLM_COMPILE},
    ):
        plan = plan_config(npu(compilation=compilation, additional_config=raw))
        assert plan.ok
        assert [w for w in plan.warnings if "enable_npugraph_ex" in w] == [
            "additional_config.ascend_compilation_config.enable_npugraph_ex has no effect: "
            f"{UNBOUND_REASON}."
        ], compilation


def test_npugraph_ex_left_at_its_default_gets_a_note_not_a_warning() -> None:
    from ascend_core.plan.npugraph_ex import UNBOUND_REASON, npugraph_ex_note

    deployment = npu(compilation={"mode": CompileMode.VLLM_COMPILE})
    plan = plan_config(deployment)
    assert not any("npugraph_ex" in w for w in plan.warnings)
    note = npugraph_ex_note(deployment, plan)
    assert note is not None and "true by default and has no effect" in note
    assert UNBOUND_REASON in note
    off = {"ascend_compilation_config": {"enable_npugraph_ex": False}}
    written = npu(compilation={"mode": CompileMode.VLLM_COMPILE}, additional_config=off)
    assert npugraph_ex_note(written, plan_config(written)) is None
    on_host = host(compilation={})
    assert npugraph_ex_note(on_host, plan_config(on_host)) is None


def test_npugraph_ex_and_static_kernels_written_true_are_two_warnings() -> None:
    """Static kernels need npugraph_ex (vllm_ascend compiles them per captured shape through
    it): with the backend unbound, both switches are reported."""
    raw = {"ascend_compilation_config": {"enable_npugraph_ex": True, "enable_static_kernel": True}}
    piecewise = {"graph_mode": GraphMode.PIECEWISE, "mode": CompileMode.VLLM_COMPILE}
    plan = plan_config(npu(compilation=piecewise, additional_config=raw))
    assert plan.graph_mode is GraphMode.PIECEWISE
    assert sum("has no effect: this plugin does not bind" in w for w in plan.warnings) == 2


def test_kv_nz_on_the_host_is_a_warning() -> None:
    deployment = host(
        mla_model(), kv_transfer_role=CONSUMER, additional_config={"enable_kv_nz": True}
    )
    plan = plan_config(deployment)
    assert not own_errors(plan)
    assert any("enable_kv_nz is ignored on the host" in w for w in plan.warnings)
