"""Every preflight check of `ascend-doctor check`, in the order an operator reads them."""

from __future__ import annotations

from ascend_core.compatibility import check_compatibility, installed_versions
from ascend_core.preflight.cann import cann_libraries_item, cann_sourced_item
from ascend_core.preflight.devices import device_item, target_device, visible_devices_item
from ascend_core.preflight.host_facts import HostFacts
from ascend_core.preflight.items import CheckItem, CheckStatus, Preflight
from ascend_core.preflight.mooncake import mooncake_library_items
from ascend_core.preflight.network import NETWORK_VARIABLES, network_items
from ascend_core.preflight.variables import registry_items
from ascend_core.preflight.versions import compatibility_item, python_item, torchvision_item
from ports.device import DeviceKind, ProbeResult
from ports.environment import Environment
from ports.system_libraries import SystemLibraries
from ports.upstream import Upstream


def run_preflight(
    env: Environment,
    upstream: Upstream,
    probe: ProbeResult,
    host: HostFacts,
    multi_node: bool | None = None,
    libraries: SystemLibraries | None = None,
) -> Preflight:
    """Every check of `ascend-doctor check`.

    The device kind checked for is what VLLM_ASCEND_DEVICE asks: cpu checks the host
    set; auto and npu check what serving on an NPU needs. `multi_node` None infers it
    from the network variables being set. `libraries` (the system's shared libraries)
    answers whether Mooncake's libibverbs is there when Mooncake is installed; None skips.
    """
    target = target_device(env)
    items = [python_item(host.python_version), device_item(target, probe)]
    verdict = check_compatibility(installed_versions(upstream), target)
    items += [compatibility_item(i) for i in verdict.items]
    items.append(torchvision_item(upstream.version("torch"), upstream.version("torchvision")))
    if target is DeviceKind.NPU:
        items += [
            cann_sourced_item(env, upstream),
            cann_libraries_item(env, host.cann_libraries),
            visible_devices_item(env, host.device_count),
        ]
        if host.triton_kernels is not None:
            items.append(CheckItem("NPU Triton kernels", CheckStatus.PASS, host.triton_kernels))
    items += registry_items(env)
    if multi_node is None:
        multi_node = any(env.get(name) is not None for name in NETWORK_VARIABLES)
    items += network_items(env, multi_node, host.interfaces)
    if libraries is not None:
        items += mooncake_library_items(upstream, libraries)
    return Preflight(tuple(items))
