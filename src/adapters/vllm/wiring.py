"""Where the vLLM adapter gets its environment, device probe, runtime and ops.

A stand-in for the composition root (adapters.container): every construction the
adapter needs is in this one module, so the container replaces exactly this.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from ports.device import DeviceKind

if TYPE_CHECKING:
    from ports.device import DeviceProbe
    from ports.environment import Environment
    from ports.ops import Ops
    from ports.runtime import DeviceRuntime


def environment() -> Environment:
    from adapters.system.environment import OsEnvironment

    return OsEnvironment()


def npu_probe() -> DeviceProbe:
    from adapters.npu.probe import NpuProbe

    return NpuProbe(environment())


@functools.cache
def device_ops(kind: DeviceKind) -> Ops:
    if kind is DeviceKind.CPU:
        from adapters.cpu.ops import CpuOps

        return CpuOps()
    raise NotImplementedError("the NPU ops adapter (adapters.npu) is not wired yet")


@functools.cache
def device_runtime(kind: DeviceKind) -> DeviceRuntime:
    if kind is DeviceKind.CPU:
        from adapters.cpu.runtime import CpuRuntime

        return CpuRuntime()
    raise NotImplementedError("the NPU runtime adapter (adapters.npu) is not wired yet")


def active_device_kind() -> DeviceKind:
    """The device of the platform vLLM activated (ours, when any of our layers runs)."""
    from vllm.platforms import current_platform

    kind = getattr(current_platform, "device_kind", None)
    if not isinstance(kind, DeviceKind):
        raise RuntimeError("the active vLLM platform is not the Ascend plugin's")
    return kind
