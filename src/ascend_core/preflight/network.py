"""Preflight items for the multi-node network variables of HCCL, gloo and vLLM."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from ascend_core.preflight.interfaces import IFNAME_CHECKS, describe_interfaces, interface_names
from ascend_core.preflight.items import CheckItem, CheckStatus
from ports.environment import Environment

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
    for name, check in IFNAME_CHECKS.items():
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
                f"(interfaces: {describe_interfaces(interfaces)})",
                f"set {name} to one of this host's addresses",
            )
    return CheckItem(name, CheckStatus.PASS, f"{name}={raw}")


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
    if gloo is not None and tp is not None and tp.strip() not in interface_names(gloo):
        items.append(
            CheckItem(
                "TP_SOCKET_IFNAME",
                CheckStatus.WARN,
                f"TP_SOCKET_IFNAME={tp} differs from GLOO_SOCKET_IFNAME={gloo}: both carry "
                "host-side process-group traffic between the same nodes",
                f"set both to the same interface, e.g. TP_SOCKET_IFNAME={interface_names(gloo)[0]}",
            )
        )
    return items
