"""The sleep-memory port on an NPU: adapters/sleep_torch.py with torch_npu's allocator.

Released storages go back to torch_npu's caching allocator, and `torch.npu.empty_cache`
returns them to the device, so a trainer in another process can take them. Offloaded
contents wait in pinned host memory. Waking takes new device memory, at new addresses:
the worker captures its graphs again.
"""

from __future__ import annotations

from types import ModuleType

from adapters.sleep_torch import TorchSleepMemory


class NpuSleepMemory(TorchSleepMemory):
    """NPU storages released to the device; offloaded tags copied to pinned host memory."""

    def __init__(self, torch_npu: ModuleType) -> None:
        super().__init__(in_host_memory=False, pin=True, empty_cache=torch_npu.npu.empty_cache)
