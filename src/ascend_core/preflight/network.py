"""Preflight checks of a serving host: each item pass, warn or fail, with the fix in one line.

Built from the ports (environment, upstream versions, device probe) plus host facts an
adapter gathers (CANN libraries found, device count, network interfaces).
"""

from __future__ import annotations

import enum
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from attrs import field, frozen

from ascend_core.compatibility import (
    CompatibilityItem,
    check_compatibility,
    installed_versions,
)
from ascend_core.device_selection import DeviceRequest
from ascend_core.env_registry import DEVICE, ENV_VARS, read_env, unknown_variables
from ascend_core.errors import AscendError, PlanErrors
from ascend_core.versions import Version, VersionRange
from ascend_core.visible_devices import VISIBLE_DEVICES_VARIABLE, visible_devices
from ports.device import DeviceKind, ProbeResult
from ports.environment import Environment
from ports.upstream import Upstream

# vLLM 0.33.0's Requires-Python.
SUPPORTED_PYTHON = VersionRange.parse(">=3.11,<3.15")
SOURCE_CANN = "source /usr/local/Ascend/ascend-toolkit/set_env.sh (or your install's set_env.sh)"
# CANN's documented range for HCCL_CONNECT_TIMEOUT, in seconds (default 120).
HCCL_CONNECT_TIMEOUT_RANGE = (120, 7200)
# The variables HCCL, gloo and vLLM read to find this node's network; any set means
# the operator is configuring a multi-node deployment.
NETWORK_VARIABLES = (
    "HCCL_IF_IP",
    "HCCL_SOCKET_IFNAME",
    "HCCL_CONNECT_TIMEOUT",
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "VLLM_HOST_IP",
)
# Linux interface names: at most 15 bytes, no slash or whitespace.
_IFNAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")


class CheckStatus(enum.Enum):
    """The verdict of one check; ordered from good to bad."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {CheckStatus.PASS: 0, CheckStatus.WARN: 1, CheckStatus.FAIL: 2}


@frozen
class CheckItem:
    """One check: what was looked at, the verdict, what was found, and the fix (if any)."""

    name: str
    status: CheckStatus
    detail: str
    fix: str = ""


def worst(statuses: Iterable[CheckStatus]) -> CheckStatus:
    """The worst of `statuses`; PASS for none."""
    return max(statuses, key=lambda s: s.rank, default=CheckStatus.PASS)


@frozen
class Preflight:
    """Every check item, in the order an operator should read them."""

    items: tuple[CheckItem, ...]

    @property
    def status(self) -> CheckStatus:
        return worst(i.status for i in self.items)

    def count(self, status: CheckStatus) -> int:
        return sum(1 for i in self.items if i.status is status)


def _frozen_map(raw: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return None if raw is None else MappingProxyType(dict(raw))


@frozen
class HostFacts:
    """What an adapter found on this host beyond the ports; None where it could not look.

    cann_libraries: each library the NPU runtime loads -> the path found, or None.
    device_count: NPUs the driver exposes (before ASCEND_RT_VISIBLE_DEVICES).
    interfaces: network interface name -> its addresses.
    """

    python_version: str
    cann_libraries: Mapping[str, str | None] = field(factory=dict, converter=_frozen_map)
    device_count: int | None = None
    interfaces: Mapping[str, tuple[str, ...]] | None = field(default=None, converter=_frozen_map)


def run_preflight(
    env: Environment,
    upstream: Upstream,
    probe: ProbeResult,
    host: HostFacts,
    multi_node: bool | None = None,
) -> Preflight:
    """Every check of `ascend-doctor check`.

    The device kind checked for is what VLLM_ASCEND_DEVICE asks: cpu checks the host
    set; auto and npu check what serving on an NPU needs. `multi_node` None infers it
    from the network variables being set.
    """
    target = _target(env)
    items = [_python(host.python_version), _device(target, probe)]
    verdict = check_compatibility(installed_versions(upstream), target)
    items += [_compatibility_item(i) for i in verdict.items]
    if target is DeviceKind.NPU:
        items += [
            _cann_sourced(env, upstream),
            _cann_libraries(env, host.cann_libraries),
            _visible_devices(env, host.device_count),
        ]
    items += _registry_items(env)
    if multi_node is None:
        multi_node = any(env.get(name) is not None for name in NETWORK_VARIABLES)
    items += network_items(env, multi_node, host.interfaces)
    return Preflight(tuple(items))


def _target(env: Environment) -> DeviceKind:
    raw = env.get(DEVICE.name)
    try:
        request = DEVICE.parse(raw) if raw is not None else DEVICE.default
    except ValueError:
        request = DEVICE.default  # the registry item reports the bad value
    return DeviceKind.CPU if request is DeviceRequest.CPU else DeviceKind.NPU


def _python(version: str) -> CheckItem:
    parsed = Version.parse(version)
    if parsed is not None and SUPPORTED_PYTHON.admits(parsed):
        return CheckItem("python", CheckStatus.PASS, f"Python {version}")
    return CheckItem(
        "python",
        CheckStatus.FAIL,
        f"Python {version}; vLLM 0.33.0 needs Python {SUPPORTED_PYTHON}",
        "create the environment with Python 3.11 or 3.12 (e.g. `python3.11 -m venv .venv`)",
    )


def _device(target: DeviceKind, probe: ProbeResult) -> CheckItem:
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
    return CheckItem(
        "device",
        CheckStatus.FAIL,
        f"no usable NPU: {probe.reason}; the plugin will decline and vLLM will not serve on Ascend",
        probe.hint or "set VLLM_ASCEND_DEVICE=cpu to serve on the host instead",
    )


def _compatibility_item(item: CompatibilityItem) -> CheckItem:
    status = CheckStatus.FAIL if item.is_problem else CheckStatus.PASS
    fix = item.fix if item.is_problem else ""
    name = item.component.value
    return CheckItem(name, status, item.message, fix)


def _cann_sourced(env: Environment, upstream: Upstream) -> CheckItem:
    home = env.get("ASCEND_HOME_PATH")
    version = upstream.cann_version()
    if home and version:
        return CheckItem(
            "CANN environment", CheckStatus.PASS, f"ASCEND_HOME_PATH={home} (CANN {version})"
        )
    if home:
        return CheckItem(
            "CANN environment",
            CheckStatus.FAIL,
            f"ASCEND_HOME_PATH={home}, but no CANN install info (version) was found there",
            f"point ASCEND_HOME_PATH at the toolkit: {SOURCE_CANN}",
        )
    if version:
        return CheckItem(
            "CANN environment",
            CheckStatus.FAIL,
            f"CANN {version} is installed but its environment is not sourced "
            "(ASCEND_HOME_PATH unset); vLLM then fails with 'Failed to infer device type'",
            SOURCE_CANN,
        )
    return CheckItem(
        "CANN environment",
        CheckStatus.FAIL,
        "no CANN toolkit found and ASCEND_HOME_PATH unset",
        f"install the CANN toolkit for your chip, then {SOURCE_CANN}",
    )


def _cann_libraries(env: Environment, found: Mapping[str, str | None]) -> CheckItem:
    if not found:
        return CheckItem("CANN libraries", CheckStatus.WARN, "not looked for", "")
    missing = sorted(lib for lib, path in found.items() if path is None)
    if missing:
        return CheckItem(
            "CANN libraries",
            CheckStatus.FAIL,
            f"{', '.join(missing)} not found in LD_LIBRARY_PATH or $ASCEND_HOME_PATH/lib64",
            f"install the CANN toolkit, then {SOURCE_CANN}",
        )
    loader_dirs = {d.rstrip("/") for d in (env.get("LD_LIBRARY_PATH") or "").split(":") if d}
    # Found only through ASCEND_HOME_PATH: the dynamic loader searches LD_LIBRARY_PATH,
    # so torch_npu would still fail to load them.
    outside = sorted(
        path for path in found.values() if path and path.rsplit("/", 1)[0] not in loader_dirs
    )
    if outside:
        return CheckItem(
            "CANN libraries",
            CheckStatus.WARN,
            f"{', '.join(outside)} exist but their directory is not in LD_LIBRARY_PATH",
            SOURCE_CANN,
        )
    return CheckItem(
        "CANN libraries",
        CheckStatus.PASS,
        ", ".join(str(p) for p in found.values()),
    )


def _visible_devices(env: Environment, device_count: int | None) -> CheckItem:
    visible = visible_devices(env.get(VISIBLE_DEVICES_VARIABLE), device_count)
    if visible.problem is not None:
        return CheckItem("visible devices", CheckStatus.FAIL, visible.problem, visible.hint)
    return CheckItem("visible devices", CheckStatus.PASS, visible.describe())


def _registry_items(env: Environment) -> list[CheckItem]:
    items: list[CheckItem] = []
    for var in ENV_VARS:
        raw = env.get(var.name)
        if raw is None:
            continue
        try:
            read_env(env, (var,))
        except AscendError as error:
            errors = error.errors if isinstance(error, PlanErrors) else (error,)
            items += [CheckItem(var.name, CheckStatus.FAIL, e.what, e.hint) for e in errors]
            continue
        items.append(CheckItem(var.name, CheckStatus.PASS, f"{var.name}={raw}: {var.doc}"))
    for unknown in unknown_variables(env):
        items.append(CheckItem(unknown.name, CheckStatus.WARN, unknown.what, unknown.hint))
    if not items:
        items.append(
            CheckItem("VLLM_ASCEND_*", CheckStatus.PASS, "none set: every default applies")
        )
    return items


# ---- multi-node network variables ---------------------------------------------------------


def network_items(
    env: Environment,
    multi_node: bool,
    interfaces: Mapping[str, tuple[str, ...]] | None = None,
) -> list[CheckItem]:
    """The HCCL / gloo / vLLM network variables, each valid and consistent with the others.

    `interfaces` (name -> addresses) lets names and addresses be checked against this host.
    """
    if not multi_node:
        return [
            CheckItem(
                "network",
                CheckStatus.PASS,
                "single node: no HCCL/gloo network variable set, none needed",
            )
        ]
    items: list[CheckItem] = []
    for name in ("HCCL_IF_IP", "VLLM_HOST_IP"):
        raw = env.get(name)
        if raw is not None:
            items.append(_ip_item(name, raw, interfaces))
    for name, check in _IFNAME_CHECKS.items():
        raw = env.get(name)
        if raw is not None:
            items.append(check(name, raw, interfaces))
    timeout = env.get("HCCL_CONNECT_TIMEOUT")
    if timeout is not None:
        items.append(_timeout_item(timeout))
    items += _consistency(env)
    return items


def _ip_item(name: str, raw: str, interfaces: Mapping[str, tuple[str, ...]] | None) -> CheckItem:
    try:
        address = ipaddress.ip_address(raw.strip())
    except ValueError:
        return CheckItem(
            name,
            CheckStatus.FAIL,
            f"{name}={raw!r} is not an IPv4 or IPv6 address",
            f"set {name} to this node's address on the network the other nodes reach",
        )
    if address.is_loopback or address.is_unspecified:
        return CheckItem(
            name,
            CheckStatus.FAIL,
            f"{name}={raw} cannot be reached from other nodes",
            f"set {name} to this node's address on the network the other nodes reach",
        )
    if interfaces is not None:
        local = {a for addrs in interfaces.values() for a in addrs}
        if str(address) not in local:
            return CheckItem(
                name,
                CheckStatus.FAIL,
                f"{name}={raw} is not an address of this host "
                f"(interfaces: {_describe_interfaces(interfaces)})",
                f"set {name} to one of this host's addresses",
            )
    return CheckItem(name, CheckStatus.PASS, f"{name}={raw}")


def _names(raw: str) -> list[str]:
    return [p.strip() for p in raw.split(",") if p.strip()]


def _ifname_list_item(
    name: str, raw: str, interfaces: Mapping[str, tuple[str, ...]] | None
) -> CheckItem:
    names = _names(raw)
    bad = [n for n in names if not _IFNAME.match(n)]
    if not names or bad:
        return CheckItem(
            name,
            CheckStatus.FAIL,
            f"{name}={raw!r} is not a comma-separated list of interface names",
            f"set {name} to the interface other nodes reach, e.g. {name}=eth0",
        )
    return _known_interfaces(name, raw, names, interfaces)


def _single_ifname_item(
    name: str, raw: str, interfaces: Mapping[str, tuple[str, ...]] | None
) -> CheckItem:
    if not _IFNAME.match(raw.strip()):
        return CheckItem(
            name,
            CheckStatus.FAIL,
            f"{name}={raw!r} is not one interface name",
            f"set {name} to one interface, e.g. {name}=eth0",
        )
    return _known_interfaces(name, raw, [raw.strip()], interfaces)


def _known_interfaces(
    name: str, raw: str, names: list[str], interfaces: Mapping[str, tuple[str, ...]] | None
) -> CheckItem:
    if interfaces is not None:
        absent = [n for n in names if n not in interfaces]
        if absent:
            return CheckItem(
                name,
                CheckStatus.FAIL,
                f"{name}={raw}: no interface {', '.join(absent)} on this host "
                f"(have: {', '.join(sorted(interfaces))})",
                f"set {name} to an interface of this host",
            )
        if any(_is_loopback(n, interfaces) for n in names):
            return CheckItem(
                name,
                CheckStatus.FAIL,
                f"{name}={raw}: a loopback interface cannot reach other nodes",
                f"set {name} to the interface other nodes reach",
            )
    return CheckItem(name, CheckStatus.PASS, f"{name}={raw}")


def _hccl_ifname_item(
    name: str, raw: str, interfaces: Mapping[str, tuple[str, ...]] | None
) -> CheckItem:
    # HCCL's syntax: a leading ^ excludes, a leading = matches exactly, else prefixes match.
    text = raw.strip()
    exclude = text.startswith("^")
    text = text.removeprefix("^")
    exact = text.startswith("=")
    names = _names(text.removeprefix("="))
    if not names or any(not _IFNAME.match(n) for n in names):
        return CheckItem(
            name,
            CheckStatus.FAIL,
            f"{name}={raw!r} is not HCCL's form: [^][=]name[,name...]",
            f"set {name} to an interface name or prefix, e.g. {name}=eth",
        )
    if interfaces is not None and not exclude:
        matched = [
            i for i in interfaces if any(i == n if exact else i.startswith(n) for n in names)
        ]
        if not matched:
            return CheckItem(
                name,
                CheckStatus.FAIL,
                f"{name}={raw} matches no interface of this host "
                f"(have: {', '.join(sorted(interfaces))})",
                f"set {name} to a name or prefix of this host's interfaces",
            )
    return CheckItem(name, CheckStatus.PASS, f"{name}={raw}")


_IfnameCheck = Callable[[str, str, Mapping[str, tuple[str, ...]] | None], CheckItem]
_IFNAME_CHECKS: Mapping[str, _IfnameCheck] = MappingProxyType(
    {
        "GLOO_SOCKET_IFNAME": _ifname_list_item,  # gloo takes a comma-separated list
        "TP_SOCKET_IFNAME": _single_ifname_item,  # TensorPipe takes one name
        "HCCL_SOCKET_IFNAME": _hccl_ifname_item,
    }
)


def _timeout_item(raw: str) -> CheckItem:
    low, high = HCCL_CONNECT_TIMEOUT_RANGE
    text = raw.strip()
    if not text.isdigit() or not low <= int(text) <= high:
        return CheckItem(
            "HCCL_CONNECT_TIMEOUT",
            CheckStatus.FAIL,
            f"HCCL_CONNECT_TIMEOUT={raw!r}: HCCL takes whole seconds in [{low}, {high}]",
            f"set HCCL_CONNECT_TIMEOUT to seconds between {low} and {high} (default {low})",
        )
    return CheckItem("HCCL_CONNECT_TIMEOUT", CheckStatus.PASS, f"HCCL_CONNECT_TIMEOUT={text}s")


def _consistency(env: Environment) -> list[CheckItem]:
    items: list[CheckItem] = []
    if env.get("GLOO_SOCKET_IFNAME") is None:
        # gloo otherwise binds to the address the hostname resolves to, often 127.0.1.1
        # or a container bridge, and the other nodes' connections hang.
        items.append(
            CheckItem(
                "GLOO_SOCKET_IFNAME",
                CheckStatus.WARN,
                "multi-node but GLOO_SOCKET_IFNAME unset: gloo binds to the address the "
                "hostname resolves to, which other nodes may not reach",
                "export GLOO_SOCKET_IFNAME=<the interface other nodes reach> on every node",
            )
        )
    if env.get("HCCL_IF_IP") is None and env.get("HCCL_SOCKET_IFNAME") is None:
        items.append(
            CheckItem(
                "HCCL_IF_IP",
                CheckStatus.WARN,
                "multi-node but neither HCCL_IF_IP nor HCCL_SOCKET_IFNAME set: HCCL picks "
                "an interface itself",
                "export HCCL_IF_IP=<this node's address> (or HCCL_SOCKET_IFNAME) on every node",
            )
        )
    if env.get("HCCL_IF_IP") is not None and env.get("HCCL_SOCKET_IFNAME") is not None:
        items.append(
            CheckItem(
                "HCCL_SOCKET_IFNAME",
                CheckStatus.WARN,
                "HCCL_IF_IP and HCCL_SOCKET_IFNAME are both set; HCCL_IF_IP takes precedence "
                "and HCCL_SOCKET_IFNAME is ignored",
                "unset one of them",
            )
        )
    gloo, tp = env.get("GLOO_SOCKET_IFNAME"), env.get("TP_SOCKET_IFNAME")
    if gloo is not None and tp is not None and tp.strip() not in _names(gloo):
        items.append(
            CheckItem(
                "TP_SOCKET_IFNAME",
                CheckStatus.WARN,
                f"TP_SOCKET_IFNAME={tp} differs from GLOO_SOCKET_IFNAME={gloo}: both carry "
                "host-side process-group traffic between the same nodes",
                f"set both to the same interface, e.g. TP_SOCKET_IFNAME={_names(gloo)[0]}",
            )
        )
    return items


def _is_loopback(name: str, interfaces: Mapping[str, tuple[str, ...]]) -> bool:
    addresses = interfaces.get(name, ())
    if name == "lo":
        return True
    return bool(addresses) and all(_loopback_address(a) for a in addresses)


def _loopback_address(text: str) -> bool:
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def _describe_interfaces(interfaces: Mapping[str, tuple[str, ...]]) -> str:
    return ", ".join(
        f"{n} {'/'.join(a) if a else '(no address)'}" for n, a in sorted(interfaces.items())
    )
