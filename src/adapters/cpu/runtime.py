"""The device-runtime port on the host: memory from the OS, no streams, torch's CPU seed."""

from __future__ import annotations

import contextlib
import ctypes
import platform
from pathlib import Path
from typing import Any

import psutil
import torch

from ports.runtime import DeviceRuntime, MemoryInfo

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


class CpuRuntime(DeviceRuntime):
    """The host as one device. Memory is the machine's: total is physical memory,
    free is what the OS reports as available, peak is this process's resident peak.
    """

    def __init__(self) -> None:
        self._peak_floor = 0

    def device(self, index: int) -> torch.device:
        """Always the one host device; every local index maps to it."""
        return torch.device("cpu")

    def set_device(self, index: int) -> None:
        """Nothing to select on the host."""

    def device_name(self, index: int = 0) -> str:
        return host_cpu_name()

    def memory_info(self) -> MemoryInfo:
        vm = psutil.virtual_memory()
        return MemoryInfo(
            free_bytes=int(vm.available),
            total_bytes=int(vm.total),
            peak_allocated_bytes=self._peak_rss(),
        )

    def allocated_bytes(self) -> int | None:
        """The heap's bytes in use (glibc mallinfo2: arenas plus mmapped chunks), or None
        without glibc.

        Host tensors are malloc'd (torch's CPU allocator aligns through posix_memalign), so
        this counts them; freed blocks are excluded, unlike the resident set, which keeps
        pages the allocator holds for reuse. It counts every other malloc of the process
        too (CPython's small objects come from its own mmapped arenas and are not in it)."""
        return _heap_in_use()

    def reset_peak_memory(self) -> None:
        """Restart the resident-set peak (Linux clear_refs); elsewhere, start from now.

        Freed heap memory is returned to the OS first (glibc malloc_trim): pages the
        process freed but still holds would otherwise be reused by the next phase without
        raising the peak, which would then understate what that phase needs.
        """
        _trim_heap()
        try:
            _CLEAR_REFS.write_text("5")
            self._peak_floor = 0
        except OSError:
            self._peak_floor = int(psutil.Process().memory_info().rss)

    def synchronize(self) -> None:
        """Host ops complete before they return: nothing is queued."""

    def empty_cache(self) -> None:
        """The host allocator keeps no device cache to release."""

    def seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def current_stream(self) -> Any:
        """A HostStream: the host runs ops in order, so every stream call is a no-op."""
        return _HOST_STREAM

    def runner_scope(self) -> contextlib.AbstractContextManager[None]:
        """vLLM's CPUModelRunner maps torch.cuda for itself; nothing to bind here."""
        return contextlib.nullcontext()

    def _peak_rss(self) -> int:
        hwm = _read_vm_hwm()
        if hwm is None:
            return max(self._peak_floor, int(psutil.Process().memory_info().rss))
        return hwm


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _heap_in_use() -> int | None:
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):  # not glibc, or glibc before 2.33
        return None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return int(info.uordblks + info.hblkhd)


def _trim_heap() -> None:
    # Not glibc: nothing to trim, and the peak starts from what the process holds.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class HostStream:
    """The stream handle of a device without streams; callers may wait on it freely."""

    def synchronize(self) -> None:
        """Host work is finished when the op returns."""

    def wait_stream(self, stream: Any) -> None:
        """One implicit stream: nothing to wait for."""

    def query(self) -> bool:
        return True


_HOST_STREAM = HostStream()


def host_cpu_name() -> str:
    """The CPU model as the OS names it, or the architecture when it does not say."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _read_vm_hwm() -> int | None:
    """The process's peak resident set in bytes (Linux VmHWM), or None where unknown."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
