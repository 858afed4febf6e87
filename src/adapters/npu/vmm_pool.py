"""The sleep-memory port on an NPU with addresses kept: weights and KV cache allocated from
torch_npu MemPools whose allocator (native/vmm_pool.cpp) maps physical memory into reserved
virtual address ranges. Sleeping unmaps and frees the physical memory (offloaded tags are
copied to pinned host memory first); waking maps new physical memory at the same
addresses, so the tensors, and the graphs captured over them, stay valid.

The native library is built on an NPU host against CANN (`build_vmm_pool_library`); where
it cannot be, the resize path of adapters/npu/sleep.py serves (graphs captured again on
waking). Nothing here has run on Ascend hardware: the tests run it on the emulated device.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import hashlib
import logging
import os
import subprocess
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import attrs
from attrs import frozen

from ports.sleep import SleepMemory, SleepOutcome, SleepTag

if TYPE_CHECKING:
    import torch

logger = logging.getLogger("vllm.plugins.ascend")

SOURCE = Path(__file__).with_name("native") / "vmm_pool.cpp"
# The allocator's tag per sleep tag (0: memory outside sleep mode's pools).
_TAG_IDS = {SleepTag.WEIGHTS: 1, SleepTag.KV_CACHE: 2}


@frozen
class VmmPoolLibrary:
    """Where the built allocator is (`path`), or why there is none (`reason`)."""

    path: str | None
    reason: str


class VmmPoolError(RuntimeError):
    """An ACL call of the pool's allocator failed."""


def build_vmm_pool_library(
    find_library: Callable[[str], str | None], cache_dir: str | None = None
) -> VmmPoolLibrary:
    """Build native/vmm_pool.cpp against the CANN that holds libascendcl.so (once; cached by
    the source's hash); a library that cannot be built is a reason, not an error."""
    ascendcl = find_library("libascendcl.so")
    if ascendcl is None:
        return VmmPoolLibrary(None, "libascendcl.so not found (source CANN's set_env.sh)")
    lib_dir = os.path.dirname(ascendcl)
    include = os.path.join(os.path.dirname(lib_dir), "include")
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    root = Path(cache_dir or os.path.join(tempfile.gettempdir(), "vllm_ascend_native"))
    target = root / f"vmm_pool_{digest}.so"
    if target.exists():
        return VmmPoolLibrary(str(target), "built before")
    root.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    command = [
        os.environ.get("CXX", "c++"), "-O2", "-std=c++17", "-shared", "-fPIC",
        f"-I{include}", str(SOURCE), f"-L{lib_dir}", "-lascendcl", "-o", str(partial),
    ]  # fmt: skip
    try:
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as error:
        detail = getattr(error, "stderr", "") or str(error)
        return VmmPoolLibrary(None, f"building {SOURCE.name} failed: {detail.strip()[-400:]}")
    os.replace(partial, target)
    return VmmPoolLibrary(str(target), f"built against {include}")


class _Native:
    """ctypes over the library's C functions."""

    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path)
        u64, i32, i64 = ctypes.c_uint64, ctypes.c_int32, ctypes.c_int64
        signatures: dict[str, tuple[list[Any], Any]] = {
            "vmm_pool_set_tag": ([ctypes.c_int], ctypes.c_int),
            "vmm_pool_ranges": (
                [ctypes.c_int, ctypes.POINTER(u64), ctypes.POINTER(u64), ctypes.POINTER(i32), i64],
                i64,
            ),
            "vmm_pool_unmap": ([u64], ctypes.c_int),
            "vmm_pool_map": ([u64], ctypes.c_int),
            "vmm_pool_to_host": ([u64, u64, u64], ctypes.c_int),
            "vmm_pool_from_host": ([u64, u64, u64], ctypes.c_int),
            "vmm_pool_zero": ([u64, u64], ctypes.c_int),
            "vmm_pool_last_error": ([], ctypes.c_int),
        }
        for name, (args, result) in signatures.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, result
        self.lib = lib

    def call(self, name: str, *args: int) -> None:
        error = int(getattr(self.lib, name)(*args))
        if error != 0:
            raise VmmPoolError(
                f"{name}{args!r} failed with ACL error {error} (see CANN's aclError list); "
                "the engine's sleep state is unchanged past the ranges already done"
            )

    def ranges(self, tag: int) -> list[tuple[int, int, bool]]:
        """(address, bytes, mapped) of every range of `tag`."""
        capacity = 64
        while True:
            addresses = (ctypes.c_uint64 * capacity)()
            sizes = (ctypes.c_uint64 * capacity)()
            mapped = (ctypes.c_int32 * capacity)()
            n = int(self.lib.vmm_pool_ranges(tag, addresses, sizes, mapped, capacity))
            if n <= capacity:
                return [(addresses[i], sizes[i], bool(mapped[i])) for i in range(n)]
            capacity = n


@attrs.define
class _Asleep:
    """A tag's ranges while asleep, with the host copies of an offloaded tag."""

    backups: dict[int, torch.Tensor] = attrs.field(factory=dict)


class NpuVmmSleepMemory(SleepMemory):
    """Weights and KV cache in per-tag MemPools of the native allocator; sleeping releases
    their physical memory and waking maps new memory at the same addresses."""

    def __init__(self, torch_npu: ModuleType, library_path: str) -> None:
        self._torch_npu = torch_npu
        self._native = _Native(library_path)
        self._allocator = torch_npu.npu.NPUPluggableAllocator(
            library_path, "vmm_pool_malloc", "vmm_pool_free"
        )
        # One pool per tag, kept for the process's life (torch frees a pool's blocks to
        # its allocator only when the pool goes).
        self._pools: dict[SleepTag, Any] = {}
        self._asleep: dict[SleepTag, _Asleep] = {}

    @property
    def addresses_kept(self) -> bool:
        return True

    @contextlib.contextmanager
    def allocation_pool(self, tag: SleepTag) -> Iterator[None]:
        pool = self._pools.get(tag)
        if pool is None:
            pool = self._pools[tag] = self._torch_npu.npu.MemPool(self._allocator.allocator())
        previous = int(self._native.lib.vmm_pool_set_tag(_TAG_IDS[tag]))
        try:
            with self._torch_npu.npu.use_mem_pool(pool):
                yield
        finally:
            self._native.lib.vmm_pool_set_tag(previous)

    def track(self, tag: SleepTag, tensors: Iterable[torch.Tensor]) -> None:
        """The pool knows its allocations; a tensor handed over must lie in them (else it
        would keep its memory through a sleep, unnoticed)."""
        if tag in self._asleep:
            raise RuntimeError(
                f"the {tag.value} are asleep; wake them (wake_up) before handing them over again"
            )
        ranges = sorted((a, a + n) for a, n, _ in self._native.ranges(_TAG_IDS[tag]))
        starts = [lo for lo, _ in ranges]
        outside = 0
        for tensor in tensors:
            if tensor.device.type == "cpu":
                continue  # host memory: nothing of the device's to release
            storage = tensor.untyped_storage()
            start, size = storage.data_ptr(), storage.nbytes()
            i = bisect.bisect_right(starts, start) - 1
            if size and not (i >= 0 and start + size <= ranges[i][1]):
                outside += size
        if outside:
            raise RuntimeError(
                f"{outside} bytes of the {tag.value} were not allocated in sleep mode's "
                f"'{tag.value}' pool, so a sleep would not release them; allocate them inside "
                "SleepMemory.allocation_pool (the worker's _maybe_get_memory_pool_context)"
            )

    def sleep(
        self, offload: Collection[SleepTag], tags: Collection[SleepTag] | None = None
    ) -> SleepOutcome:
        import torch

        released = offloaded = 0
        for tag, tag_id in _TAG_IDS.items():
            if tag in self._asleep or (tags is not None and tag not in tags):
                continue
            asleep = _Asleep()
            for address, size, mapped in self._native.ranges(tag_id):
                if not mapped:
                    continue
                if tag in offload:
                    backup = torch.empty(size, dtype=torch.uint8, pin_memory=True)
                    self._native.call("vmm_pool_to_host", backup.data_ptr(), address, size)
                    asleep.backups[address] = backup
                    offloaded += size
                self._native.call("vmm_pool_unmap", address)
                released += size
            self._asleep[tag] = asleep
        return SleepOutcome(released_bytes=released, offloaded_bytes=offloaded)

    def wake_up(self, tags: Collection[SleepTag] | None = None) -> None:
        for tag in list(self._asleep):
            if tags is not None and tag not in tags:
                continue
            backups = self._asleep[tag].backups
            for address, size, mapped in self._native.ranges(_TAG_IDS[tag]):
                if mapped:
                    continue
                self._native.call("vmm_pool_map", address)
                backup = backups.pop(address, None)
                if backup is not None:
                    self._native.call("vmm_pool_from_host", address, backup.data_ptr(), size)
                else:
                    self._native.call("vmm_pool_zero", address, size)
            del self._asleep[tag]

    def asleep(self) -> frozenset[SleepTag]:
        return frozenset(self._asleep)

    def held_bytes(self, tag: SleepTag) -> int:
        return sum(n for _, n, mapped in self._native.ranges(_TAG_IDS[tag]) if mapped)
