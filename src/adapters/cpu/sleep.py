"""The sleep-memory port on the host: adapters/torch/sleep.py over host tensors.

On the host device "device memory" is the process's RAM. Level 1 keeps the weights where
they are (host memory is where level 1 offloads them to: copying them would hold the same
bytes twice) and frees the KV cache; level 2 frees both. Freed memory goes back to the OS
(glibc malloc_trim), so the resident set drops by what was released.
"""

from __future__ import annotations

from adapters.cpu.runtime import _trim_heap
from adapters.torch.sleep import TorchSleepMemory


class CpuSleepMemory(TorchSleepMemory):
    """Host storages released in place; an offloaded tag stays where it is."""

    def __init__(self) -> None:
        super().__init__(in_host_memory=True, pin=False, empty_cache=_trim_heap)
