"""FakeProbe: the device-probe port answering a fixed result."""

from __future__ import annotations

from ports.device import DeviceProbe, ProbeResult


class FakeProbe(DeviceProbe):
    """Returns the result it was given; counts how often it was asked."""

    def __init__(self, result: ProbeResult) -> None:
        self.result = result
        self.calls = 0

    def probe(self) -> ProbeResult:
        self.calls += 1
        return self.result
