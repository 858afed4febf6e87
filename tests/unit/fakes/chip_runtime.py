"""FakeChipRuntime: a FakeRuntime whose device reports a given SoC name."""

from __future__ import annotations

from ports.runtime import MemoryInfo
from unit.fakes.runtime import FakeRuntime


class FakeChipRuntime(FakeRuntime):
    """Names its device `soc` (as torch_npu's get_device_name does); counts the reads."""

    def __init__(self, soc: str) -> None:
        super().__init__(MemoryInfo(free_bytes=0, total_bytes=0, peak_allocated_bytes=0))
        self.soc = soc
        self.reads = 0

    def device_name(self, index: int = 0) -> str:
        self.reads += 1
        return self.soc
