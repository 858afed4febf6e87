"""A Mooncake TransferEngine in one process: registered memory, and writes that copy bytes
between host addresses, refusing any byte outside what was registered."""

from __future__ import annotations

import ctypes


class FakeTransferEngine:
    """The two calls vLLM's MooncakeConnector moves KV with (batch_register_memory,
    batch_transfer_sync_write), over host memory; what it copied is kept in `writes`."""

    def __init__(self) -> None:
        self.registered: list[tuple[int, int]] = []
        self.writes: list[tuple[int, int, int]] = []  # (source, destination, length)

    def batch_register_memory(self, ptrs: list[int], lengths: list[int]) -> int:
        self.registered += list(zip(ptrs, lengths, strict=True))
        return 0

    def _inside(self, ptr: int, length: int) -> bool:
        return any(base <= ptr and ptr + length <= base + size for base, size in self.registered)

    def batch_transfer_sync_write(
        self, session: str, sources: list[int], destinations: list[int], lengths: list[int]
    ) -> int:
        for src, dst, length in zip(sources, destinations, lengths, strict=True):
            if not (self._inside(src, length) and self._inside(dst, length)):
                return -1  # as the engine fails a write outside registered memory
            ctypes.memmove(dst, src, length)
            self.writes.append((src, dst, length))
        return 0
