"""Plan step: parallel sizes (PCP/DCP shapes, sequence parallel, expert parallel)."""

from __future__ import annotations

import pytest

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
