"""Preflight items for the device: the kind asked for, the NPU probe, the visible devices."""

from __future__ import annotations

from ascend_core.device_selection import DeviceRequest
from ascend_core.env_registry import DEVICE
from ascend_core.preflight.items import CheckItem, CheckStatus
from ascend_core.visible_devices import VISIBLE_DEVICES_VARIABLE, visible_devices
from ports.device import DeviceKind, ProbeResult
from ports.environment import Environment

HOST_DEVICE_SETTING = "VLLM_ASCEND_DEVICE=cpu"


def target_device(env: Environment) -> DeviceKind:
    raw = env.get(DEVICE.name)
    try:
        request = DEVICE.parse(raw) if raw is not None else DEVICE.default
    except ValueError:
        request = DEVICE.default  # the registry item reports the bad value
    return DeviceKind.CPU if request is DeviceRequest.CPU else DeviceKind.NPU


def device_item(target: DeviceKind, probe: ProbeResult) -> CheckItem:
    if target is DeviceKind.CPU:
        return CheckItem(
            "device", CheckStatus.PASS, "VLLM_ASCEND_DEVICE=cpu: the host device serves"
        )
    if probe.available:
        facts = probe.facts
        extra = ""
        if facts is not None:
            extra = (
                f" ({facts.device_count} x {facts.device_name or facts.chip_family.value}, "
                f"{facts.memory_bytes_per_device / (1 << 30):.0f} GiB each)"
            )
        return CheckItem("device", CheckStatus.PASS, f"NPU usable: {probe.reason}{extra}")
    # The one place `check` names the host device: without an NPU every NPU item fails,
    # and serving on this machine's CPUs is what a first try usually wants.
    host = (
        f"to serve on this machine's CPUs instead, set {HOST_DEVICE_SETTING} (then "
        "`ascend-doctor check` checks what the host device needs)"
    )
    return CheckItem(
        "device",
        CheckStatus.FAIL,
        f"no usable NPU: {probe.reason}; the plugin will decline and vLLM will not serve on Ascend",
        f"{probe.hint}; or, {host}" if probe.hint else host,
    )


def visible_devices_item(env: Environment, device_count: int | None) -> CheckItem:
    visible = visible_devices(env.get(VISIBLE_DEVICES_VARIABLE), device_count)
    if visible.problem is not None:
        return CheckItem("visible devices", CheckStatus.FAIL, visible.problem, visible.hint)
    return CheckItem("visible devices", CheckStatus.PASS, visible.describe())
