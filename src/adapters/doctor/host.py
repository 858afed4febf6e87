"""Host facts for `check`: Python, CANN libraries, NPU count and network interfaces.

Reads files and sockets only (CANN libraries and devices through the NPU probe's own
finder and lister, which the container hands in); never imports torch, so it works
where `import torch` is broken.
"""

from __future__ import annotations

import fcntl
import platform
import socket
import struct
from collections.abc import Callable, Sequence

from ascend_core.preflight import HostFacts

_SIOCGIFADDR = 0x8915


def interfaces() -> dict[str, tuple[str, ...]] | None:
    """Interface name -> its IPv4 and IPv6 addresses; None where they cannot be listed."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    found = {name: list(_ipv4(name)) for name in names}
    for name, address in _ipv6():
        found.setdefault(name, []).append(address)
    return {name: tuple(addresses) for name, addresses in found.items()}


def _ipv4(name: str) -> tuple[str, ...]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
        except OSError:
            return ()  # no IPv4 address on this interface
    return (socket.inet_ntoa(packed[20:24]),)


def _ipv6() -> list[tuple[str, str]]:
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as f:
            rows = [line.split() for line in f]
    except OSError:
        return []
    out = []
    for row in rows:
        if len(row) == 6:
            hexaddr = row[0]
            text = ":".join(hexaddr[i : i + 4] for i in range(0, 32, 4))
            out.append(
                (row[5], socket.inet_ntop(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, text)))
            )
    return out


def gather_host_facts(
    find_library: Callable[[str], str | None],
    list_devices: Callable[[], Sequence[int]],
    libraries: Sequence[str],
    kernel_path: Callable[[], str] | None = None,
) -> HostFacts:
    """The facts `check` needs, through the same CANN finder, device lister and library
    names as the probe; `kernel_path`: the NPU adapter's kernel path, described."""
    return HostFacts(
        python_version=platform.python_version(),
        cann_libraries={lib: find_library(lib) for lib in libraries},
        device_count=len(list_devices()),
        interfaces=interfaces(),
        triton_kernels=kernel_path() if kernel_path is not None else None,
    )
