"""Plan step: parallel sizes (PCP/DCP shapes, sequence parallel, expert parallel)."""

from __future__ import annotations

import pytest

from ascend_core.deployment import ParallelSettings
from ascend_core.errors import ConfigError
from ascend_core.plan import fields, plan_config
from unit.core.plan_fixtures import dense_model, npu


@pytest.mark.parametrize(("tp", "dcp"), [(1, 1), (4, 2), (8, 8), (8, 4)])
def test_dcp_dividing_tp_is_accepted(tp: int, dcp: int) -> None:
    assert plan_config(npu(parallel={"tp": tp, "dcp": dcp})).ok


def test_dcp_not_dividing_tp_is_an_error_naming_both_sizes_and_valid_choices() -> None:
    plan = plan_config(npu(parallel={"tp": 6, "dcp": 4}))
    (error,) = plan.errors
    assert isinstance(error, ConfigError)
    assert "decode_context_parallel_size=4" in error.what
    assert "tensor_parallel_size=6" in error.what
    assert "[1, 2, 3, 6]" in error.hint


@pytest.mark.parametrize("dcp", [1, 2, 8])
def test_with_pcp_dcp_may_be_off_the_pcp_axis_or_the_whole_grid(dcp: int) -> None:
    assert plan_config(npu(parallel={"tp": 4, "pcp": 2, "dcp": dcp})).ok


def test_with_pcp_any_other_dcp_is_an_error_listing_the_valid_sizes() -> None:
    plan = plan_config(npu(parallel={"tp": 4, "pcp": 2, "dcp": 4}))
    (error,) = plan.errors
    assert "decode_context_parallel_size=4" in error.what
    assert "prefill_context_parallel_size=2" in error.what
    assert "[1, 2, 8]" in error.hint


def test_sequence_parallel_without_tp_is_turned_off_with_a_reason() -> None:
    plan = plan_config(npu(parallel={"tp": 1, "sequence_parallel": True}))
    assert plan.ok
    (change,) = plan.changes_to(fields.SEQUENCE_PARALLEL)
    assert change.field == "env.VLLM_ASCEND_ENABLE_FLASHCOMM1"
    assert (change.old, change.new) == ("1", "0")
    assert "tensor_parallel_size is 1" in change.reason
    assert plan.decisions.sequence_parallel is False


def test_sequence_parallel_with_tp_is_kept() -> None:
    plan = plan_config(npu(parallel={"tp": 2, "sequence_parallel": True}))
    assert not plan.changes_to(fields.SEQUENCE_PARALLEL)
    assert plan.decisions.sequence_parallel is True


def test_expert_parallel_on_a_dense_model_is_a_warning() -> None:
    plan = plan_config(npu(dense_model(), parallel={"expert_parallel": True}))
    assert plan.ok
    assert any("enable_expert_parallel" in w and "Qwen3ForCausalLM" in w for w in plan.warnings)


def test_expert_parallel_on_a_moe_model_is_silent() -> None:
    plan = plan_config(npu(dense_model(is_moe=True), parallel={"expert_parallel": True}))
    assert not any("enable_expert_parallel" in w for w in plan.warnings)


def test_sequence_parallel_on_moe_needs_expert_parallel() -> None:
    """vllm_ascend/platform.py _validate_sfa_dcp_kv_sp (and utils.enable_sp): sequence
    parallelism on a MoE model requires enable_expert_parallel."""
    from unit.core.plan_fixtures import mla_model

    plan = plan_config(npu(mla_model(), parallel={"tp": 2, "sequence_parallel": True}))
    (error,) = own_errors(plan)
    assert "enable_expert_parallel" in error.what and "--enable-expert-parallel" in error.hint
    ok = npu(mla_model(), parallel={"tp": 2, "sequence_parallel": True, "expert_parallel": True})
    assert not own_errors(plan_config(ok))
    assert plan_config(npu(dense_model(), parallel={"tp": 2, "sequence_parallel": True})).ok


@pytest.mark.parametrize(
    ("tp", "dcp", "chip", "errors"),
    [
        (4, 4, "A2", 0),
        (4, 4, "A3", 0),
        (4, 2, "A2", 1),  # dcp != tp
        (4, 4, "A5", 1),  # no replicated-indexer kernels
        (4, 2, "A5", 2),
    ],
)
def test_dcp_on_sparse_mla_spans_tp_on_a2_a3_only(
    tp: int, dcp: int, chip: str, errors: int
) -> None:
    """vllm_ascend/platform.py _validate_parallel_config (with utils.py
    enable_sfa_dcp_replicated_indexer): sparse MLA with DCP needs dcp_size == tp_size and
    the SFA_DCP_REPLICATED_INDEXER profiles (A2/A3)."""
    from ports.device import ChipFamily
    from unit.core.plan_fixtures import dsa_model

    plan = plan_config(npu(dsa_model(), chip=ChipFamily(chip), parallel={"tp": tp, "dcp": dcp}))
    assert len(own_errors(plan)) == errors, plan.errors
    for error in own_errors(plan):
        assert "sparse MLA" in error.what


def test_dcp_on_compressed_attention_is_not_the_sparse_mla_rule() -> None:
    from unit.core.plan_fixtures import dsa_model

    plan = plan_config(npu(dsa_model(compressed_attention=True), parallel={"tp": 4, "dcp": 2}))
    assert not any("sparse MLA" in e.what for e in own_errors(plan))


def own_errors(plan):  # type: ignore[no-untyped-def]
    """The plan's errors other than the support matrix's (MLA/MoE are refused on the NPU)."""
    from ascend_core.errors import UnsupportedFeatureError

    return [e for e in plan.errors if not isinstance(e, UnsupportedFeatureError)]


def test_enable_flashcomm1_written_wins_over_the_variable_and_is_turned_off_with_tp_1() -> None:
    """vllm_ascend/ascend_config.py derive_and_validate reads additional_config.enable_flashcomm1
    as FlashComm1 (sequence parallelism); here the key, when written, wins over
    VLLM_ASCEND_ENABLE_FLASHCOMM1 (the one precedence rule) and is switched off with TP 1."""
    from ascend_core.deployment_builder import Requested, build_deployment
    from ascend_core.quantization import QuantMethod
    from ports.device import ChipFamily, DeviceKind
    from unit.fakes.environment import FakeEnvironment

    def built(tp: int, key: object, env: dict[str, str]):  # type: ignore[no-untyped-def]
        requested = Requested(
            parallel=ParallelSettings(tp=tp), additional_config={"enable_flashcomm1": key}
        )
        return build_deployment(
            dense_model(),
            DeviceKind.NPU,
            ChipFamily.A2,
            requested,
            FakeEnvironment(env),
            QuantMethod.NONE,
            None,
        )

    on = {"VLLM_ASCEND_ENABLE_FLASHCOMM1": "1"}
    assert built(2, True, {}).parallel.sequence_parallel is True
    assert built(2, False, on).parallel.sequence_parallel is False  # the key wins
    plan = plan_config(built(1, True, {}))
    assert [c.field for c in plan.changes if "flashcomm1" in c.field.lower()] == [
        fields.SEQUENCE_PARALLEL,
        fields.SEQUENCE_PARALLEL_KEY,
    ]
    clash = plan_config(built(2, False, on))
    assert any("disagree" in w and "enable_flashcomm1=false" in w for w in clash.warnings)
    assert any("enable_flashcomm1 is deprecated" in w for w in clash.warnings)
