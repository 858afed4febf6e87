"""Step: vLLM's torch profiler options against the serving device (the profiler kinds
are the support matrix's: check_support)."""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.plan.result import Draft
from ascend_core.profiling import profiled_activities, profiler_errors
from ports.device import DeviceKind
from ports.profiler import ProfiledActivity


def check_profiler(deployment: Deployment, draft: Draft) -> Draft:
    """Refuse at start what the device's profiler cannot record; say what it will record."""
    settings = deployment.profiler
    errors = profiler_errors(settings, deployment.device_kind)
    for error in errors:
        draft = draft.fail(error)
    if errors or settings.profiler != "torch":
        return draft
    recorded = profiled_activities(settings, deployment.device_kind)
    what = []
    if ProfiledActivity.HOST in recorded:
        what.append("the host's ops (torch's CPU activity)")
    if ProfiledActivity.DEVICE in recorded:
        what.append("the NPU's kernels (torch_npu's NPU activity)")
    npu = deployment.device_kind is DeviceKind.NPU
    tool = "torch_npu's profiler" if npu else "torch's profiler"
    return draft.warn(
        f"Profiling with {tool}: /start_profile to /stop_profile records "
        f"{' and '.join(what)} into {settings.trace_dir} (serving is slower while it records)."
    )
