"""What an adapter found on the host beyond the ports, for the preflight checks."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from attrs import field, frozen


def _frozen_map(raw: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return None if raw is None else MappingProxyType(dict(raw))


@frozen
class HostFacts:
    """What an adapter found on this host beyond the ports; None where it could not look.

    cann_libraries: each library the NPU runtime loads -> the path found, or None.
    device_count: NPUs the driver exposes (before ASCEND_RT_VISIBLE_DEVICES).
    interfaces: network interface name -> its addresses.
    triton_kernels: the NPU adapter's kernel path decision, described.
    """

    python_version: str
    cann_libraries: Mapping[str, str | None] = field(factory=dict, converter=_frozen_map)
    device_count: int | None = None
    interfaces: Mapping[str, tuple[str, ...]] | None = field(default=None, converter=_frozen_map)
    # The NPU's kernel path (torch, or kernels/triton) and why; None: not looked at.
    triton_kernels: str | None = None
