"""The device probe for the host: the CPU is always there to serve."""

from __future__ import annotations

import psutil

from adapters.cpu.runtime import host_cpu_name
from ports.device import ChipFamily, DeviceFacts, DeviceKind, DeviceProbe, ProbeResult


class CpuProbe(DeviceProbe):
    """Reports the host as one device with the machine's physical memory."""

    def probe(self) -> ProbeResult:
        name = host_cpu_name()
        return ProbeResult(
            kind=DeviceKind.CPU,
            available=True,
            reason=f"the host CPU ({name}) can always serve",
            facts=DeviceFacts(
                kind=DeviceKind.CPU,
                chip_family=ChipFamily.HOST,
                device_count=1,
                memory_bytes_per_device=int(psutil.virtual_memory().total),
                device_name=name,
            ),
        )
