"""Plan step: the model runner the worker builds, and what vLLM's engine is made to believe."""

from __future__ import annotations

import pytest

from ascend_core.deployment import GraphMode
from ascend_core.plan import ModelRunner, fields, plan_config
from ascend_core.plan.model_runner import decide_model_runner, runner_variable, v2_requested
from ports.device import DeviceKind
from unit.core.plan_fixtures import host, npu

EAGER = {"enforce_eager": True}


@pytest.mark.parametrize("deployment", [npu(), host()], ids=["npu", "host"])
def test_v1_on_both_devices_and_vllms_variable_written_with_the_reason(deployment) -> None:
    plan = plan_config(deployment)
    assert plan.model_runner is ModelRunner.V1
    assert "VLLM_USE_V2_MODEL_RUNNER=1, eager" in plan.decisions.model_runner_reason
    (change,) = plan.changes_to(fields.V2_MODEL_RUNNER)
    assert (change.old, change.new) == (None, "0")
    assert "scheduler output" in change.reason and "V2 is opt-in" in change.reason
    assert not [w for w in plan.warnings if "model runner" in w]
    text = plan.describe()
    assert "runner=V1" in text.splitlines()[0]
    assert "  runner  the " in text
    assert "V1 runner (V2 is opt-in on the NPU" in text


def test_v2_asked_on_the_eager_npu_is_built_and_vllm_told_v2() -> None:
    plan = plan_config(npu(v2_model_runner="1", compilation=EAGER))
    assert plan.ok and plan.model_runner is ModelRunner.V2
    assert "NpuModelRunnerV2, eager" in plan.decisions.model_runner_reason
    assert not [w for w in plan.warnings if "model runner" in w]
    assert plan.changes_to(fields.V2_MODEL_RUNNER) == ()  # "1" already says V2
    assert "runner=V2" in plan.describe().splitlines()[0]


def test_v2_asked_on_the_npu_with_the_plans_graphs_is_built_with_them() -> None:
    plan = plan_config(npu(v2_model_runner="1"))
    assert plan.ok and plan.model_runner is ModelRunner.V2
    assert "FULL_AND_PIECEWISE graphs on the NPU's" in plan.decisions.model_runner_reason
    assert not [w for w in plan.warnings if "model runner" in w]
    assert plan.changes_to(fields.V2_MODEL_RUNNER) == ()


def test_v2_asked_where_not_served_is_v1_with_a_warning_not_refused() -> None:
    deployment, why = host(v2_model_runner="1", compilation=EAGER), "no Triton driver"
    plan = plan_config(deployment)
    assert plan.ok and plan.model_runner is ModelRunner.V1
    (warning,) = [w for w in plan.warnings if "model runner" in w]
    assert "VLLM_USE_V2_MODEL_RUNNER=1 asked for vLLM's V2 runner" in warning
    assert why in warning and "serving on V1" in warning
    (change,) = plan.changes_to(fields.V2_MODEL_RUNNER)
    assert (change.old, change.new) == ("1", "0")


def test_v1_already_asked_changes_nothing() -> None:
    plan = plan_config(host(v2_model_runner="0"))
    assert plan.changes_to(fields.V2_MODEL_RUNNER) == ()
    assert plan.model_runner is ModelRunner.V1


def test_vllms_reading_of_the_variable() -> None:
    assert [v2_requested(v) for v in (None, "", "0", " 0 ", "1", "2")] == [
        False, False, False, False, True, True,
    ]
    decision = decide_model_runner(DeviceKind.CPU, "1")
    assert decision.overrides_request and "host worker builds V1" in decision.reason
    full = decide_model_runner(DeviceKind.NPU, "1", GraphMode.FULL_DECODE_ONLY)
    assert full.runner is ModelRunner.V2 and not full.overrides_request
    assert "FULL_DECODE_ONLY graphs on the NPU's" in full.reason
    pieces = decide_model_runner(DeviceKind.NPU, "1", GraphMode.PIECEWISE)
    assert pieces.runner is ModelRunner.V2 and not pieces.overrides_request
    assert "PIECEWISE graphs on the NPU's" in pieces.reason
    assert decide_model_runner(DeviceKind.NPU, "1").runner is ModelRunner.V2
    assert [runner_variable(r) for r in ModelRunner] == ["0", "1"]
