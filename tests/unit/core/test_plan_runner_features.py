"""The runner decision's rules: each feature the NPU's V2 runner does not serve yet turns a
V2 request on the NPU into V1, its reason in the plan's decision, warning and change."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from ascend_core.deployment import KvTransferRole
from ascend_core.plan import ModelRunner, fields, plan_config
from ascend_core.plan.model_runner import decide_model_runner
from ascend_core.plan.runner_features import RunnerFeatures, v2_not_served
from ports.device import DeviceKind
from unit.core.plan_fixtures import dense_model, npu

EAGER = {"enforce_eager": True}
QWEN3_NEXT = dense_model(
    architecture="Qwen3NextForCausalLM", model_type="qwen3_next", hybrid=True, attention_layers=7
)

# Each rule: the deployment's fields that turn it on, and what its reason must say.
RULES: dict[str, tuple[dict[str, Any], str]] = {
    "speculative": (
        {"speculative": {"method": "mtp", "num_speculative_tokens": 1}},
        "speculative decoding ('mtp'): V2 drafts with its own speculators",
    ),
    "kv_connector": (
        {"kv_transfer_role": KvTransferRole.PRODUCER},
        "a KV connector (P/D): V2 drives a connector through its own wrapper",
    ),
    "hybrid": ({"model": QWEN3_NEXT}, "a hybrid model: V2 keeps mamba/linear-attention state"),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_each_feature_v2_does_not_serve_falls_back_to_v1_with_its_reason(rule: str) -> None:
    given, why = RULES[rule]
    plan = plan_config(npu(v2_model_runner="1", compilation=EAGER, **given))
    assert plan.model_runner is ModelRunner.V1, plan.describe()
    reason = plan.decisions.model_runner_reason
    assert "VLLM_USE_V2_MODEL_RUNNER=1 asked for vLLM's V2 runner" in reason
    assert "the NPU worker builds V1, its V2 runner does not serve" in reason and why in reason
    # Logged (the plan's warning), shown (describe is what `ascend-doctor plan` prints),
    # and vLLM's engine told V1 (its variable changed from the operator's "1").
    (warning,) = [w for w in plan.warnings if "model runner" in w]
    assert why in warning and "serving on V1" in warning
    assert why in plan.describe()
    (change,) = plan.changes_to(fields.V2_MODEL_RUNNER)
    assert (change.old, change.new) == ("1", "0") and why in change.reason


def test_without_those_features_v2_asked_on_the_npu_is_built() -> None:
    plan = plan_config(npu(v2_model_runner="1", compilation=EAGER))
    assert plan.model_runner is ModelRunner.V2
    assert v2_not_served(RunnerFeatures.of(npu())) == ()


@pytest.mark.parametrize(
    "given",
    [{"parallel": {"tp": 2}}, {"cache": {"enable_sleep_mode": True}}, {"lora": True}],
    ids=["tp2", "sleep", "lora"],
)
def test_tensor_parallelism_sleep_mode_and_lora_are_served_on_v2(given: dict[str, Any]) -> None:
    plan = plan_config(npu(v2_model_runner="1", compilation=EAGER, **given))
    assert plan.model_runner is ModelRunner.V2, plan.describe()
    assert "the NPU worker builds it (NpuModelRunnerV2" in plan.decisions.model_runner_reason
    assert not [w for w in plan.warnings if "model runner" in w]


def test_v2_not_asked_is_v1_without_a_warning_whatever_the_features() -> None:
    plan = plan_config(npu(lora=True, parallel={"tp": 2}))
    assert plan.model_runner is ModelRunner.V1
    assert "does not serve" not in plan.decisions.model_runner_reason
    assert not [w for w in plan.warnings if "model runner" in w]


def test_every_feature_found_is_named_in_one_reason() -> None:
    features = RunnerFeatures(speculative_method="mtp", kv_transfer=True, hybrid=True)
    reasons = v2_not_served(features)
    assert [r.split(":")[0] for r in reasons] == [
        "speculative decoding ('mtp')", "a KV connector (P/D)", "a hybrid model"
    ]
    decision = decide_model_runner(DeviceKind.NPU, "1", features=features)
    assert decision.runner is ModelRunner.V1 and decision.overrides_request
    assert all(r in decision.reason for r in reasons)


@pytest.mark.parametrize("method", ["suffix", "custom_class"])
def test_vllms_own_v2_rules_are_worded_as_vllms(method: str) -> None:
    (reason,) = v2_not_served(RunnerFeatures(speculative_method=method))
    assert f"speculative method '{method}': vLLM's V2 runner does not support it" in reason


def test_the_features_read_from_the_deployment() -> None:
    deployment = npu(
        QWEN3_NEXT,
        lora=True,
        parallel={"tp": 2},
        cache={"enable_sleep_mode": True},
        speculative={"method": "eagle3", "num_speculative_tokens": 2},
        kv_transfer_role=KvTransferRole.BOTH,
    )
    assert RunnerFeatures.of(deployment) == RunnerFeatures("eagle3", True, True)
    assert RunnerFeatures.of(attrs.evolve(deployment, kv_transfer_role=None)).kv_transfer is False
