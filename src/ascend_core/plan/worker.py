"""Step: pick the worker kind from the device that serves."""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.errors import DeviceUnavailableError
from ascend_core.plan.result import Draft, WorkerKind
from ports.device import ChipFamily, DeviceKind


def pick_worker(deployment: Deployment, draft: Draft) -> Draft:
    """NPU worker on an Ascend chip, host worker on the CPU device."""
    if deployment.device_kind is DeviceKind.CPU:
        return draft.decide(worker_kind=WorkerKind.HOST)
    if deployment.chip_family is ChipFamily.HOST:
        draft = draft.fail(
            DeviceUnavailableError(
                "device kind is npu but chip family is host: no Ascend chip was found to serve on.",
                "Check that the NPU driver sees the devices (npu-smi info), or set "
                "VLLM_ASCEND_DEVICE=cpu to serve on the host.",
            )
        )
    return draft.decide(worker_kind=WorkerKind.NPU)
