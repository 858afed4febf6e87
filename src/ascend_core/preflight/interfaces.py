"""Checks of network interface names against their syntax and this host's interfaces."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType

from ascend_core.preflight.items import CheckItem, CheckStatus

# Linux interface names: at most 15 bytes, no slash or whitespace.
_IFNAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")


def interface_names(raw: str) -> list[str]:
    return [p.strip() for p in raw.split(",") if p.strip()]


def _ifname_list_item(
    name: str, raw: str, interfaces: Mapping[str, tuple[str, ...]] | None
) -> CheckItem:
    names = interface_names(raw)
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
    names = interface_names(text.removeprefix("="))
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
IFNAME_CHECKS: Mapping[str, _IfnameCheck] = MappingProxyType(
    {
        "GLOO_SOCKET_IFNAME": _ifname_list_item,  # gloo takes a comma-separated list
        "TP_SOCKET_IFNAME": _single_ifname_item,  # TensorPipe takes one name
        "HCCL_SOCKET_IFNAME": _hccl_ifname_item,
    }
)


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


def describe_interfaces(interfaces: Mapping[str, tuple[str, ...]]) -> str:
    return ", ".join(
        f"{n} {'/'.join(a) if a else '(no address)'}" for n, a in sorted(interfaces.items())
    )
