"""Device facts the core asks about: which chip family, how many devices, how much memory."""

from __future__ import annotations

import abc
import enum

from attrs import frozen


class ChipFamily(enum.Enum):
    """Ascend chip families, plus the host used when no NPU serves."""

    A2 = "A2"  # Atlas 800I/T A2 (Ascend 910B)
    A3 = "A3"  # Atlas A3 super pod (Ascend 910C)
    A5 = "A5"  # Ascend 950
    P310 = "310P"  # Atlas 300I Duo/Pro inference cards
    HOST = "host"  # no NPU: the CPU adapter serves


class DeviceKind(enum.Enum):
    """Which device adapter serves; the value of VLLM_ASCEND_DEVICE other than auto."""

    NPU = "npu"
    CPU = "cpu"


@frozen
class DeviceFacts:
    """What is known of the devices that will serve."""

    kind: DeviceKind
    chip_family: ChipFamily
    device_count: int
    memory_bytes_per_device: int
    device_name: str = ""


@frozen
class ProbeResult:
    """Whether a device kind can serve here; when not, why and what fixes it."""

    kind: DeviceKind
    available: bool
    reason: str
    hint: str = ""
    facts: DeviceFacts | None = None


class DeviceProbe(abc.ABC):
    """Looks at this machine for one device kind without initialising it."""

    @abc.abstractmethod
    def probe(self) -> ProbeResult:
        """Say whether the device is usable, with facts when it is."""
