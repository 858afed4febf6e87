"""Step: which of vLLM's model runners the worker builds, and what vLLM's engine believes.

vLLM decides V1 or V2 on the engine side (VllmConfig.use_v2_model_runner: HiSparse or
watermarking, then VLLM_USE_V2_MODEL_RUNNER, then whether Triton has an active driver, then
its list of V2's unsupported features) and reads the answer there: the scheduler shapes
its output for it. The worker builds what the plan decides: V1 unless the operator asks
for V2 (VLLM_USE_V2_MODEL_RUNNER=1) on the NPU, eager or with any graph mode (the NPU's V2
runner, adapters/vllm/worker/npu_model_runner_v2.py: its FULL graphs through V2's graph
manager on the NPU's graphs, npu_graphs_v2.py, its piecewise graphs through the compiled
model's pieces on the platform's graph wrapper; its Triton kernels in
ascend_core.v2_kernels).
Where V2 is asked and not served (the host; on the NPU, a feature its V2 runner does not
serve yet: plan.runner_features), V1 serves with the reason. With triton-ascend installed
(an NPU host) vLLM would pick V2 by itself: the plan writes the variable vLLM reads
first, so the engine believes what the worker builds.
"""

from __future__ import annotations

from attrs import frozen

from ascend_core.deployment import Deployment, GraphMode
from ascend_core.plan import fields
from ascend_core.plan.result import Draft, ModelRunner
from ascend_core.plan.runner_features import RunnerFeatures, v2_not_served
from ports.device import DeviceKind

# vLLM's own variable (vllm/envs.py): "1" asks for V2, "0" for V1, unset lets vLLM decide.
V2_VARIABLE = "VLLM_USE_V2_MODEL_RUNNER"
V1_VALUE = "0"
V2_VALUE = "1"
WHY_V1 = f"V2 is opt-in on the NPU: {V2_VARIABLE}=1, eager or with graphs; issue 48"
# Why a V2 request is served on V1, by what is missing.
HOST_NO_V2 = (
    "vLLM's V2 runs its input preparation and sampling as Triton kernels, and the host has "
    "no Triton driver (no Triton CPU backend here)"
)


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


def decide_model_runner(
    kind: DeviceKind,
    variable: str | None,
    graph_mode: GraphMode = GraphMode.NONE,
    features: RunnerFeatures | None = None,
) -> RunnerDecision:
    """V2 where asked for on the NPU (eager or any graph mode) and every feature of the
    deployment is one its V2 runner serves; V1 otherwise.

    A V2 request not served is overridden with a warning, not refused: the variable picks
    vLLM's implementation, not what is served (V1 gives the same tokens), and vLLM itself
    falls back to V1 with a warning where V2 lacks a feature.
    """
    device = "host" if kind is DeviceKind.CPU else "NPU"
    if not v2_requested(variable):
        return RunnerDecision(
            ModelRunner.V1, f"the {device} worker builds vLLM's V1 runner ({WHY_V1})", False
        )
    asked = f"{V2_VARIABLE}={variable} asked for vLLM's V2 runner"
    if kind is DeviceKind.CPU:
        return RunnerDecision(
            ModelRunner.V1, f"{asked}; the host worker builds V1 ({HOST_NO_V2})", True
        )
    missing = v2_not_served(features or RunnerFeatures())
    if missing:
        return RunnerDecision(
            ModelRunner.V1,
            f"{asked}; the NPU worker builds V1, its V2 runner does not serve "
            + "; ".join(missing),
            True,
        )
    return RunnerDecision(
        ModelRunner.V2,
        f"{asked}: the NPU worker builds it (NpuModelRunnerV2, "
        + ("eager" if graph_mode is GraphMode.NONE else f"{graph_mode.name} graphs on the NPU's")
        + "; its Triton kernels through triton-ascend)",
        False,
    )


def pick_model_runner(deployment: Deployment, draft: Draft) -> Draft:
    """The runner decision, and VLLM_USE_V2_MODEL_RUNNER set so vLLM's engine agrees."""
    given = deployment.v2_model_runner
    decision = decide_model_runner(
        deployment.device_kind,
        given,
        draft.decisions.graph_mode,
        RunnerFeatures.of(deployment),
    )
    draft = draft.decide(model_runner=decision.runner, model_runner_reason=decision.reason)
    if decision.overrides_request:
        draft = draft.warn(f"model runner: {decision.reason}; serving on V1.")
    value = runner_variable(decision.runner)
    if given != value:
        draft = draft.change(
            fields.V2_MODEL_RUNNER,
            given,
            value,
            f"vLLM's engine must shape its scheduler output for the runner the worker "
            f"builds: {decision.reason}",
        )
    return draft


def runner_variable(runner: ModelRunner) -> str:
    """VLLM_USE_V2_MODEL_RUNNER's value that makes vLLM's engine believe `runner`."""
    return V2_VALUE if runner is ModelRunner.V2 else V1_VALUE
