"""Step: which of vLLM's model runners the worker builds, and what vLLM's engine believes.

vLLM decides V1 or V2 on the engine side (VllmConfig.use_v2_model_runner: HiSparse or
watermarking, then VLLM_USE_V2_MODEL_RUNNER, then whether Triton has an active driver, then
its list of V2's unsupported features) and reads the answer there: the scheduler shapes
its output for it. Our workers build V1 on both devices, whatever vLLM would pick: with
triton-ascend installed (an NPU host) vLLM would pick V2. So the plan writes the variable
vLLM reads first, and the engine believes what the worker builds.
"""

from __future__ import annotations

from attrs import frozen

from ascend_core.deployment import Deployment
from ascend_core.plan import fields
from ascend_core.plan.result import Draft, ModelRunner
from ports.device import DeviceKind

# vLLM's own variable (vllm/envs.py): "1" asks for V2, "0" for V1, unset lets vLLM decide.
V2_VARIABLE = "VLLM_USE_V2_MODEL_RUNNER"
V1_VALUE = "0"
WHY_V1 = "the NPU runner on vLLM's V2 is issue 48"


@frozen
class RunnerDecision:
    """The runner the worker builds, why, and whether that overrides the operator."""

    runner: ModelRunner
    reason: str
    overrides_request: bool  # VLLM_USE_V2_MODEL_RUNNER asked for V2

    def describe(self) -> str:
        return f"{self.runner.name} ({self.reason})"


def v2_requested(value: str | None) -> bool:
    """Whether VLLM_USE_V2_MODEL_RUNNER asks for V2 (vLLM reads it as bool(int(value)))."""
    text = (value or "").strip()
    return bool(text) and text != V1_VALUE


def decide_model_runner(kind: DeviceKind, variable: str | None) -> RunnerDecision:
    """V1 on both devices until the NPU runner on V2 lands (issue 48).

    VLLM_USE_V2_MODEL_RUNNER=1 is overridden with a warning, not refused: the variable
    picks vLLM's implementation, not what is served (V1 gives the same tokens), and vLLM
    itself falls back to V1 with a warning where V2 lacks a feature.
    """
    device = "host" if kind is DeviceKind.CPU else "NPU"
    if v2_requested(variable):
        reason = (
            f"{V2_VARIABLE}={variable} asked for vLLM's V2 runner; the {device} worker "
            f"builds V1 ({WHY_V1})"
        )
        return RunnerDecision(ModelRunner.V1, reason, overrides_request=True)
    return RunnerDecision(
        ModelRunner.V1, f"the {device} worker builds vLLM's V1 runner ({WHY_V1})", False
    )


def pick_model_runner(deployment: Deployment, draft: Draft) -> Draft:
    """The runner decision, and VLLM_USE_V2_MODEL_RUNNER=0 so vLLM's engine agrees."""
    given = deployment.v2_model_runner
    decision = decide_model_runner(deployment.device_kind, given)
    draft = draft.decide(model_runner=decision.runner, model_runner_reason=decision.reason)
    if decision.overrides_request:
        draft = draft.warn(f"model runner: {decision.reason}; serving on V1.")
    if given != V1_VALUE:
        draft = draft.change(
            fields.V2_MODEL_RUNNER,
            given,
            V1_VALUE,
            f"vLLM's engine must shape its scheduler output for the runner the worker "
            f"builds: {decision.reason}",
        )
    return draft
