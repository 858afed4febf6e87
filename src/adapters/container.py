"""The composition root: which adapter serves each port, decided once per process.

Tests override providers (`with container.environment.override(fake): ...`)
instead of patching modules. Device adapters are built lazily: the host
adapters import torch, the NPU ones need torch_npu, and neither is touched
until a worker asks for its ops or runtime.
"""

from __future__ import annotations

from dependency_injector import containers, providers

from adapters.cpu.communicator import GlooCommunicator
from adapters.cpu.ops import CpuOps
from adapters.cpu.probe import CpuProbe
from adapters.cpu.runtime import CpuRuntime
from adapters.npu.collective import HcclCommunicator
from adapters.npu.loader import load_torch_npu
from adapters.npu.ops import NpuOps
from adapters.npu.probe import NpuProbe
from adapters.npu.runtime import NpuRuntime
from adapters.system.environment import OsEnvironment
from adapters.system.upstream import MetadataUpstream
from ascend_core.device_selection import DeviceDecision, select_device
from ascend_core.env_registry import EnvSettings, read_env
from ports.device import DeviceProbe


def _decide(settings: EnvSettings, npu_probe: DeviceProbe) -> DeviceDecision:
    return select_device(settings.device, npu_probe.probe())


def _serving_kind(decision: DeviceDecision) -> str:
    if decision.kind is None:
        # Device adapters are asked for only once the platform was activated.
        raise RuntimeError(f"no device serves: {decision.reason}")
    return decision.kind.value


class Container(containers.DeclarativeContainer):
    """Production wiring; one instance per process (see `container()`)."""

    # Driven ports: the world outside, as the core sees it.
    environment = providers.Singleton(OsEnvironment)
    upstream = providers.Singleton(MetadataUpstream)

    # Probes and the device decision (the core decides; probes only look).
    npu_probe = providers.Singleton(NpuProbe, environment)
    cpu_probe = providers.Singleton(CpuProbe)
    env_settings = providers.Singleton(read_env, environment)
    device_decision = providers.Singleton(_decide, env_settings, npu_probe)

    # Device adapters, selected by the decision.
    torch_npu = providers.Singleton(load_torch_npu)
    serving_kind = providers.Callable(_serving_kind, device_decision)
    ops = providers.Selector(
        serving_kind,
        npu=providers.Singleton(NpuOps, torch_npu),
        cpu=providers.Singleton(CpuOps),
    )
    runtime = providers.Selector(
        serving_kind,
        npu=providers.Singleton(NpuRuntime, torch_npu),
        cpu=providers.Singleton(CpuRuntime),
    )
    communicator = providers.Selector(
        serving_kind,
        npu=providers.Singleton(HcclCommunicator),
        cpu=providers.Singleton(GlooCommunicator),
    )


_CONTAINER: Container | None = None


def container() -> Container:
    """The process's container, built on first use (vLLM loads plugins in every process)."""
    global _CONTAINER
    if _CONTAINER is None:
        _CONTAINER = Container()
    return _CONTAINER

