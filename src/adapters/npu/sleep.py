"""The sleep-memory port on an NPU: adapters/npu/vmm_pool.py where its allocator is built, else
adapters/torch/sleep.py with torch_npu's caching allocator (below).

Released storages go back to torch_npu's caching allocator, and `torch.npu.empty_cache`
returns them to the device, so a trainer in another process can take them. Offloaded
contents wait in pinned host memory. Waking takes new device memory, at new addresses:
the worker captures its graphs again.
"""

from __future__ import annotations

import logging
from types import ModuleType

from adapters.npu.vmm_pool import NpuVmmSleepMemory, VmmPoolLibrary
from adapters.torch.sleep import TorchSleepMemory
from ports.sleep import SleepMemory

logger = logging.getLogger("vllm.plugins.ascend")


class NpuSleepMemory(TorchSleepMemory):
    """NPU storages released to the device; offloaded tags copied to pinned host memory."""

    def __init__(self, torch_npu: ModuleType) -> None:
        super().__init__(in_host_memory=False, pin=True, empty_cache=torch_npu.npu.empty_cache)


def npu_sleep_memory(torch_npu: ModuleType, library: VmmPoolLibrary) -> SleepMemory:
    """The pool with addresses kept (adapters/npu/vmm_pool.py) where its native allocator
    was built; storages resized otherwise, with the reason logged."""
    if library.path is not None:
        return NpuVmmSleepMemory(torch_npu, library.path)
    logger.info(
        "Sleep mode on the NPU resizes storages (new addresses on waking, graphs captured "
        "again): its address-keeping pool is unavailable: %s.",
        library.reason,
    )
    return NpuSleepMemory(torch_npu)
