"""Plan step: the model runner the worker builds, and what vLLM's engine is made to believe."""

from __future__ import annotations

import pytest

from ascend_core.plan import ModelRunner, fields, plan_config
from ascend_core.plan.model_runner import decide_model_runner, v2_requested
from ports.device import DeviceKind
from unit.core.plan_fixtures import host, npu


@pytest.mark.parametrize("deployment", [npu(), host()], ids=["npu", "host"])
def test_v1_on_both_devices_and_vllms_variable_written_with_the_reason(deployment) -> None:
    plan = plan_config(deployment)
    assert plan.model_runner is ModelRunner.V1
    assert "issue 48" in plan.decisions.model_runner_reason
    (change,) = plan.changes_to(fields.V2_MODEL_RUNNER)
    assert (change.old, change.new) == (None, "0")
    assert "scheduler output" in change.reason and "issue 48" in change.reason
    assert not [w for w in plan.warnings if "model runner" in w]
    text = plan.describe()
    assert "runner=V1" in text.splitlines()[0]
    assert "  runner  the " in text
    assert "V1 runner (the NPU runner on vLLM's V2 is issue 48)" in text


def test_asking_for_v2_is_overridden_with_a_warning_not_refused() -> None:
    plan = plan_config(npu(v2_model_runner="1"))
    assert plan.ok and plan.model_runner is ModelRunner.V1
    (warning,) = [w for w in plan.warnings if "model runner" in w]
    assert "VLLM_USE_V2_MODEL_RUNNER=1 asked for vLLM's V2 runner" in warning
    assert "serving on V1" in warning
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
