"""Which device adapter serves: VLLM_ASCEND_DEVICE against what the NPU probe saw."""

from __future__ import annotations

import enum

from attrs import frozen

from ascend_core.errors import DeviceUnavailableError
from ports.device import DeviceKind, ProbeResult


class DeviceRequest(enum.Enum):
    """The values VLLM_ASCEND_DEVICE accepts."""

    AUTO = "auto"
    NPU = "npu"
    CPU = "cpu"


@frozen
class DeviceDecision:
    """The device that serves, or None when the plugin declines; always with the reason."""

    kind: DeviceKind | None
    reason: str

    @property
    def declined(self) -> bool:
        return self.kind is None


def select_device(request: DeviceRequest, npu: ProbeResult) -> DeviceDecision:
    """Decide the serving device.

    auto serves on the NPU when one is usable and declines otherwise, so vLLM
    can pick another platform; the host device is used only when asked for,
    since serving a model on the CPU by surprise would be worse than declining.
    An explicit npu request that the probe refutes is an error, raised now
    rather than after a long model load.
    """
    if request is DeviceRequest.CPU:
        return DeviceDecision(DeviceKind.CPU, "VLLM_ASCEND_DEVICE=cpu: the host device serves")
    if npu.available:
        return DeviceDecision(DeviceKind.NPU, f"NPU found: {npu.reason}")
    if request is DeviceRequest.NPU:
        raise DeviceUnavailableError(
            f"VLLM_ASCEND_DEVICE=npu but no usable NPU: {npu.reason}",
            npu.hint or "unset VLLM_ASCEND_DEVICE, or set it to cpu to serve on the host",
        )
    return DeviceDecision(
        None,
        f"Ascend plugin declines: {npu.reason}; set VLLM_ASCEND_DEVICE=cpu to serve on the host",
    )
