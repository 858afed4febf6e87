"""What `ascend_compilation_config.enable_npugraph_ex` does here: nothing yet, said aloud."""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.plan.result import ConfigPlan
from ports.device import ChipFamily, DeviceKind

KEY = "ascend_compilation_config.enable_npugraph_ex"
# In vllm-ascend the switch picks torch_npu's npugraph_ex compile backend for full graphs.
# This plugin captures NPU graphs through vLLM's static graph wrapper on the runtime
# port's NPUGraph, and vLLM compiles the pieces with its "eager" backend: no code path
# reads the switch, so it is reported, never silently dropped.
UNBOUND_REASON = (
    "this plugin does not bind torch_npu's npugraph_ex compile backend; NPU graphs are "
    "captured through vLLM's static graph wrapper on torch_npu's NPUGraph, and the "
    "compiled pieces run on vLLM's eager backend"
)
P310_REASON = "Atlas 300I (310P) has no npugraph_ex backend"


def unused_reason(deployment: Deployment) -> str:
    """Why enable_npugraph_ex (and enable_static_kernel, which needs it) has no effect."""
    return P310_REASON if deployment.chip_family is ChipFamily.P310 else UNBOUND_REASON


def npugraph_ex_note(deployment: Deployment, plan: ConfigPlan) -> str | None:
    """The line serve and the doctor show when enable_npugraph_ex keeps its default (true)
    on an NPU: it has no effect, and why. None elsewhere; a written true gets the plan's
    warning instead (plan/graph.py)."""
    config = plan.decisions.ascend_config
    if deployment.device_kind is not DeviceKind.NPU or config is None:
        return None
    if config.given(KEY) or not config.ascend_compilation_config.enable_npugraph_ex:
        return None
    return (
        f"additional_config.{KEY} is true by default and has no effect: "
        f"{unused_reason(deployment)}."
    )
