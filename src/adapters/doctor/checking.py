"""`ascend-doctor check`: the core's preflight items, grouped into sections for reading."""

from __future__ import annotations

from collections.abc import Callable

from adapters.doctor.report import Report, Section
from ascend_core.preflight import NETWORK_VARIABLES, CheckItem, HostFacts, run_preflight
from ascend_core.preflight.mooncake import ITEM as MOONCAKE_ITEM
from ports.device import DeviceKind, DeviceProbe, ProbeResult
from ports.environment import Environment
from ports.system_libraries import SystemLibraries
from ports.upstream import Upstream

_VERSIONS = {"python", "vllm", "torch", "torch_npu", "CANN", "torchvision"}
_DEVICE = {"device", "CANN environment", "CANN libraries", "visible devices"}
_NETWORK = {"network", *NETWORK_VARIABLES}


def _section(item: CheckItem) -> str:
    if item.name in _VERSIONS:
        return "versions"
    if item.name in _DEVICE:
        return "device and CANN"
    if item.name in _NETWORK:
        return "network (multi-node)"
    if item.name == MOONCAKE_ITEM:
        return "P/D disaggregation (Mooncake)"
    return "VLLM_ASCEND_* variables"


def probe_safely(make_probe: Callable[[], DeviceProbe]) -> ProbeResult:
    """The NPU probe's answer; a probe that cannot even be built is itself the finding."""
    try:
        return make_probe().probe()
    except Exception as exc:  # e.g. `import torch` failing because torch_npu lacks CANN
        return ProbeResult(
            DeviceKind.NPU,
            False,
            f"the NPU probe failed: {type(exc).__name__}: {exc}",
            "run `python -c 'import torch'` to see the failure; torch_npu installed "
            "without CANN sourced is the usual cause",
        )


def check_report(
    env: Environment,
    upstream: Upstream,
    probe: ProbeResult,
    host: HostFacts,
    multi_node: bool | None = None,
    libraries: SystemLibraries | None = None,
) -> Report:
    result = run_preflight(env, upstream, probe, host, multi_node, libraries)
    order = [
        "versions",
        "device and CANN",
        "VLLM_ASCEND_* variables",
        "network (multi-node)",
        "P/D disaggregation (Mooncake)",
    ]
    grouped: dict[str, list[CheckItem]] = {title: [] for title in order}
    for item in result.items:
        grouped[_section(item)].append(item)
    data = {"python": host.python_version, "device_count": host.device_count}
    sections = [Section(t, grouped[t]) for t in order if grouped[t] or t != order[-1]]
    return Report("check", sections, data)
