"""Where the vLLM adapter gets its environment, device probe, runtime and ops.

A stand-in for the composition root (adapters.container): every construction the
adapter needs is in this one module, so the container replaces exactly this.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ports.device import ChipFamily, DeviceFacts, DeviceKind, DeviceProbe, ProbeResult
from ports.environment import Environment

if TYPE_CHECKING:
    from ports.ops import Ops
    from ports.runtime import DeviceRuntime


class _ProcessEnvironment(Environment):
    def get(self, name: str) -> str | None:
        return os.environ.get(name)

    def names(self) -> Iterable[str]:
        return tuple(os.environ)


class _NpuPresenceProbe(DeviceProbe):
    """Looks for the NPU driver's device nodes and the torch_npu package, importing nothing."""

    def probe(self) -> ProbeResult:
        nodes = glob.glob("/dev/davinci[0-9]*")
        if not nodes:
            return ProbeResult(
                DeviceKind.NPU, False, "no Ascend NPU device node (/dev/davinci*) on this machine",
                "run on a host with an Ascend NPU and its driver installed",
            )
        if importlib.util.find_spec("torch_npu") is None:
            return ProbeResult(
                DeviceKind.NPU, False, "the torch_npu package is not installed",
                "pip install 'vllm-plugin-ascend[npu]' on a host with CANN installed",
            )
        facts = DeviceFacts(DeviceKind.NPU, ChipFamily.A2, len(nodes), 0)
        return ProbeResult(DeviceKind.NPU, True, f"{len(nodes)} NPU device node(s)", facts=facts)


def environment() -> Environment:
    return _ProcessEnvironment()


def npu_probe() -> DeviceProbe:
    return _NpuPresenceProbe()


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
