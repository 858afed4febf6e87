"""Host facts for `check`: Python, CANN libraries, NPU count and network interfaces.

Reads files and sockets only; never imports torch or torch_npu, so it works where
`import torch` itself is broken (torch_npu installed without CANN).
"""

from __future__ import annotations

import fcntl
import os
import platform
import socket
import struct
from collections.abc import Callable, Sequence

from ascend_core.preflight import HostFacts
from ports.environment import Environment

# Same list as the NPU probe's: torch_npu fails to import without either.
CANN_LIBRARIES = ("libascendcl.so", "libhccl.so")
_SIOCGIFADDR = 0x8915


def cann_search_path(env: Environment) -> list[str]:
    """LD_LIBRARY_PATH, then $ASCEND_HOME_PATH/lib64 and $ASCEND_TOOLKIT_HOME/lib64."""
    dirs = [d for d in (env.get("LD_LIBRARY_PATH") or "").split(":") if d]
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        home = env.get(var)
        if home:
            dirs.append(os.path.join(home, "lib64"))
    return dirs


def find_libraries(
    env: Environment,
    libraries: Sequence[str] = CANN_LIBRARIES,
    is_file: Callable[[str], bool] = os.path.isfile,
) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for lib in libraries:
        found[lib] = next(
            (p for d in cann_search_path(env) if is_file(p := os.path.join(d, lib))), None
        )
    return found


def davinci_count(dev_dir: str = "/dev") -> int:
    """NPUs the driver exposes, counted from its /dev/davinci<N> nodes."""
    try:
        names = os.listdir(dev_dir)
    except OSError:
        return 0
    return sum(1 for n in names if n.startswith("davinci") and n[7:].isdigit())


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


def gather(env: Environment) -> HostFacts:
    return HostFacts(
        python_version=platform.python_version(),
        cann_libraries=find_libraries(env),
        device_count=davinci_count(),
        interfaces=interfaces(),
    )
