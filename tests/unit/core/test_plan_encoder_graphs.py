"""The plan's word on graphs for a model with a vision tower: the language model captured as
a text model's, the tower eager with the reason; vLLM's encoder graphs turned off."""

from __future__ import annotations

from ascend_core.deployment import GraphMode
from ascend_core.plan import fields, plan_config
from ascend_core.plan.encoder_graphs import HOST_ENCODER_EAGER_REASON, NPU_ENCODER_EAGER_REASON
from unit.core.plan_fixtures import dense_model, host, npu

VL = dense_model(architecture="Qwen2_5_VLForConditionalGeneration", vision=True, dtype="bfloat16")


def test_npu_captures_the_language_model_and_runs_the_tower_eagerly() -> None:
    plan = plan_config(npu(VL, mm_off={"video"}))
    assert plan.ok, plan.errors
    assert plan.graph_mode is GraphMode.FULL_AND_PIECEWISE  # as for the text model
    said = plan.decisions.encoder_execution
    assert said.startswith("the language model's steps are captured as a text model's "
                           "(FULL_AND_PIECEWISE)")
    assert NPU_ENCODER_EAGER_REASON in said
    assert f"encoder {said}" in plan.describe()
    assert not plan.changes_to(fields.ENCODER_GRAPHS)  # vLLM's default: no encoder graphs


def test_vllms_encoder_graphs_are_turned_off_with_the_reason() -> None:
    plan = plan_config(npu(VL, mm_off={"video"}, compilation={"encoder_graphs": True}))
    (change,) = plan.changes_to(fields.ENCODER_GRAPHS)
    assert (change.old, change.new, change.reason) == (True, False, NPU_ENCODER_EAGER_REASON)
    eager = plan_config(npu(VL, mm_off={"video"}, compilation={"enforce_eager": True}))
    assert eager.decisions.encoder_execution.startswith("the language model runs without graphs")


def test_the_host_and_text_models_and_idle_towers() -> None:
    assert HOST_ENCODER_EAGER_REASON in plan_config(host(VL)).decisions.encoder_execution
    assert plan_config(npu(dense_model())).decisions.encoder_execution == ""
    idle = plan_config(npu(VL, mm_off={"image", "video"}))
    assert idle.decisions.encoder_execution == ""
