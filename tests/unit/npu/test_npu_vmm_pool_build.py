"""Sleep mode's native allocator on an NPU host (adapters/npu/vmm_pool.py): where it cannot
be built, a reason, and the NPU's sleep memory falls back to resizing storages."""

from __future__ import annotations

import types

from adapters.npu.sleep import NpuSleepMemory, npu_sleep_memory
from adapters.npu.vmm_pool import VmmPoolLibrary, build_vmm_pool_library


def test_without_cann_there_is_a_reason_not_an_error() -> None:
    library = build_vmm_pool_library(lambda name: None)
    assert library.path is None and "libascendcl.so not found" in library.reason


def test_without_the_library_storages_are_resized() -> None:
    torch_npu = types.SimpleNamespace(npu=types.SimpleNamespace(empty_cache=lambda: None))
    memory = npu_sleep_memory(torch_npu, VmmPoolLibrary(None, "not built"))  # type: ignore[arg-type]
    assert isinstance(memory, NpuSleepMemory) and not memory.addresses_kept
