"""Plan step: the user's quantization choice against what the model files say."""

from __future__ import annotations

import pytest

from ascend_core.errors import QuantizationError
from ascend_core.plan import fields, plan_config
from ascend_core.quantization import QuantMethod
from unit.core.plan_fixtures import npu


def test_nothing_chosen_nothing_found_means_no_quantization_and_no_change() -> None:
    plan = plan_config(npu())
    assert plan.decisions.quantization is QuantMethod.NONE
    assert not plan.changes_to(fields.QUANTIZATION)


def test_detected_method_is_applied_with_a_reason() -> None:
    plan = plan_config(npu(detected_quantization=QuantMethod.ASCEND))
    (change,) = plan.changes_to(fields.QUANTIZATION)
    assert (change.old, change.new) == (None, QuantMethod.ASCEND)
    assert "model files describe ascend" in change.reason
    assert plan.decisions.quantization is QuantMethod.ASCEND


def test_agreeing_choice_needs_no_change_or_warning() -> None:
    plan = plan_config(npu(user_quantization="Ascend", detected_quantization=QuantMethod.ASCEND))
    assert plan.decisions.quantization is QuantMethod.ASCEND
    assert not plan.changes_to(fields.QUANTIZATION)
    assert not plan.warnings


@pytest.mark.parametrize("files_say", [QuantMethod.ASCEND, QuantMethod.NONE])
def test_a_differing_choice_wins_with_a_warning(files_say: QuantMethod) -> None:
    plan = plan_config(npu(user_quantization="fp8", detected_quantization=files_say))
    assert plan.ok
    assert plan.decisions.quantization is QuantMethod.FP8
    assert not plan.changes_to(fields.QUANTIZATION)
    (warning,) = plan.warnings
    assert "model_config.quantization='fp8'" in warning
    assert "using fp8 as asked" in warning


def test_a_gpu_only_method_is_refused_with_a_hint() -> None:
    (error,) = plan_config(npu(user_quantization="awq")).errors
    assert isinstance(error, QuantizationError)
    assert "model_config.quantization='awq'" in error.what
    assert "ModelSlim" in error.hint


def test_an_unknown_method_is_refused_with_a_suggestion() -> None:
    (error,) = plan_config(npu(user_quantization="acsend")).errors
    assert "model_config.quantization='acsend'" in error.what
    assert "Did you mean 'ascend'?" in error.hint
