"""vLLM entry points: `register` (vllm.platform_plugins), `register_general` (general_plugins)."""

from __future__ import annotations

import atexit
import gc
import logging
import sys

from adapters.container import container
from adapters.vllm.engine.startup_errors import decline_reason, stop_on_our_errors
from ascend_core.device_selection import DeviceDecision
from ports.device import ChipFamily, DeviceKind

logger = logging.getLogger("vllm.plugins.ascend")

PLATFORM_PATHS = {
    DeviceKind.NPU: "adapters.vllm.engine.platform.AscendNpuPlatform",
    DeviceKind.CPU: "adapters.vllm.engine.platform.AscendHostPlatform",
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
    with stop_on_our_errors():
        decision = decide_device()
    if decision.kind is None:
        # With the VLLM_ASCEND_* names nothing reads (a misspelt VLLM_ASCEND_DEVICE=cpu).
        reason = decline_reason(decision.reason, container().environment())
        # A warning, so it shows before vLLM has configured its logging (INFO would not).
        logger.warning("%s", reason)
        atexit.register(repeat_if_nothing_served, reason)
        return None
    atexit.unregister(unfreeze_gc_at_exit)  # once per process, however often vLLM asks
    atexit.register(unfreeze_gc_at_exit)
    return PLATFORM_PATHS[decision.kind]


def unfreeze_gc_at_exit() -> None:
    """At exit of a process we serve in: hand vLLM's frozen heap back to the collector.

    vLLM freezes the heap once started (`vllm.utils.gc_utils.freeze_gc_heap`, in the API
    server's lifespan, the engine core and the GPU worker), and frozen objects are never
    collected, not even by the interpreter's last collection at exit. Triton's bindings
    (`triton._C.libtriton`, nanobind; torch._dynamo imports Triton in every vLLM process)
    then find their types and functions alive when nanobind checks at exit, and every
    stop of `vllm serve` ended in about 30 lines of `nanobind: leaked 4 instances / 64
    types / 514 functions`. Unfrozen, the interpreter's last collection frees them: no
    report, and no other effect (serving is over).
    """
    gc.unfreeze()


def repeat_if_nothing_served(reason: str) -> None:
    """At exit: our reason again, when no platform served this process after we declined.

    Then vLLM ends in its "Failed to infer device type" traceback, which buries the one
    line that says why (logged at the top). Python runs atexit hooks after printing the
    traceback of the error that ended the process (sys.last_value), so the reason is
    the last thing the operator reads. A process where another platform (built-in or
    plugin) served, that never resolved one, or that ended without an error prints
    nothing.
    """
    if getattr(sys, "last_value", None) is None:
        return
    platforms = sys.modules.get("vllm.platforms")
    current = getattr(platforms, "_current_platform", None)
    if current is None or not current.is_unspecified():
        return
    sys.stderr.write(f"vllm-plugin-ascend: no platform serves vLLM here. {reason}\n")


def register_general() -> None:
    """Run in every vLLM process: custom ops, the attention backend name, the patch plan.

    Re-entrant: each registration checks whether it is already in place.
    """
    from adapters.vllm.engine import registration

    kind, family = serving_device()
    if kind is None:
        return  # another platform serves: leave vLLM's layers alone
    registration.register_all(kind, family)
