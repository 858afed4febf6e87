"""vLLM entry points: `register` (vllm.platform_plugins), `register_general` (general_plugins)."""

from __future__ import annotations

import logging

from adapters.container import container
from ascend_core.device_selection import DeviceDecision
from ascend_core.errors import AscendError
from ports.device import ChipFamily, DeviceKind

logger = logging.getLogger("vllm.plugins.ascend")

PLATFORM_PATHS = {
    DeviceKind.NPU: "adapters.vllm.platform.AscendNpuPlatform",
    DeviceKind.CPU: "adapters.vllm.platform.AscendHostPlatform",
}


def decide_device() -> DeviceDecision:
    """The serving device from VLLM_ASCEND_DEVICE and the NPU probe (raises on npu without NPU).

    The container decides once per process; tests choose the device by overriding its
    environment and npu_probe providers.
    """
    decision: DeviceDecision = container().device_decision()
    return decision


def serving_device() -> tuple[DeviceKind | None, ChipFamily]:
    """The serving device kind (None: declined) and its chip family, read once per process
    from the serving runtime (HOST on the host device)."""
    kind = decide_device().kind
    if kind is None:
        return None, ChipFamily.HOST
    chip: ChipFamily = container().serving_chip()
    return kind, chip


def register() -> str | None:
    """The platform class path, or None (with the reason logged) when the plugin declines.

    An explicit request for a device that is not there (VLLM_ASCEND_DEVICE=npu without an
    NPU) stops the process: vLLM catches a plugin's exceptions and falls back to another
    platform, so only SystemExit ends startup at once, with the message naming what is missing.
    """
    try:
        decision = decide_device()
    except AscendError as exc:
        raise SystemExit(f"vllm-plugin-ascend: {exc}") from exc
    if decision.kind is None:
        # A warning, so it shows before vLLM has configured its logging (INFO would not).
        logger.warning("%s", decision.reason)
        return None
    return PLATFORM_PATHS[decision.kind]


def register_general() -> None:
    """Run in every vLLM process: custom ops, the attention backend name, the patch plan.

    Re-entrant: each registration checks whether it is already in place.
    """
    from adapters.vllm import registration

    registration.register_all()
