"""One pinned host buffer and one device buffer that the step's small inputs live in.

A uniform decode step's inputs (positions, sequence lengths, query offsets, the discard
mask, the block table, the slots, the attention plan's staged indices) are each a few
hundred bytes, and each used to go to the device in a copy of its own: a host call per
copy on an NPU, around a step whose model is one graph replay. Here every one of those
persistent buffers is a slice of one device arena, and its host half the same slice of
one pinned host arena: the step writes them on the host, and one copy of the arena's
used span sends them all. The slices keep their addresses for the runner's life, so a
captured graph reads this step's values at each replay (the emulated NPU replays over
the same memory: a value left in a stale buffer gives other ids).

Only a step whose every arena slice was written on the host may flush the whole span
(`defer`): a step of vLLM's own way computes some of them on the device (positions,
slots) and copies the rest itself, as before.

The copy is non_blocking from pinned memory: on an NPU it reads the host arena when its
stream gets there, not when it is issued. Under async scheduling the host prepares step
N+1 while step N runs, so a write of the arena before step N's copy ran would be sent by
it. Each copy (`send`) records the arena's event after it, and the host writes the arena
again only once that event is reached: V1's runner passes vLLM's own
`prepare_inputs_event`, which vLLM synchronizes before each step's input preparation (the
arena's copy comes after vLLM records it, so it is recorded again); V2's tail waits for it
itself (`writable`). Either wait is normally already over: the copy precedes step N's
model, and the host has seen step N-1's output. The emulated NPU refuses a rewrite before
that (docs/emulated-npu.md).
"""

from __future__ import annotations

from typing import Any

import torch

# Every slice starts at a multiple of this many bytes (int64 views need 8).
ALIGN = 64


class StagingArena:
    """A pinned host arena and its device twin, handed out in slices of one type."""

    def __init__(
        self, nbytes: int, device: torch.device, pin_memory: bool = True, event: Any = None
    ) -> None:
        """`event`: a device event (the runner's, made in its scope) recorded after each
        copy of a pinned arena; None where nothing orders the copies (a host arena)."""
        self.nbytes = nbytes
        pinned = pin_memory and torch.device(device).type != "cpu"
        self.host = torch.zeros(nbytes, dtype=torch.uint8, pin_memory=pinned)
        self.device = torch.zeros(nbytes, dtype=torch.uint8, device=device)
        self.used = 0
        # Set by a step whose every slice was written on the host, until its one copy.
        self.deferred = False
        self.flushes = 0
        self._event = event if pinned else None
        self._unordered = False  # a copy was sent since the host last waited for it
        self.waits = 0  # waits for a copy (`writable`), normally already complete

    def fits(self, nbytes: int) -> bool:
        return _aligned(self.used) + nbytes <= self.nbytes

    def take(self, numel: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The next (host, device) slices of `numel` elements of `dtype`, zeroed."""
        start = _aligned(self.used)
        size = numel * torch.empty((), dtype=dtype).element_size()
        if start + size > self.nbytes:
            raise RuntimeError(
                f"the staging arena holds {self.nbytes} bytes; {start + size} were asked "
                "(adapters/vllm/worker/staging_arena.py: the size is counted from the "
                "runner's buffers at its construction)"
            )
        self.used = start + size
        host = self.host[start : start + size].view(dtype)
        return host, self.device[start : start + size].view(dtype)

    def bind(self, buffer: Any) -> None:
        """Make a vLLM CpuGpuBuffer's halves slices of the arenas (its values kept)."""
        host, device = self.take(buffer.cpu.numel(), buffer.cpu.dtype)
        host = host.view(buffer.cpu.shape)
        device = device.view(buffer.cpu.shape)
        host.copy_(buffer.cpu)
        device.copy_(buffer.gpu)
        buffer.cpu, buffer.gpu = host, device
        if hasattr(buffer, "np"):
            buffer.np = host.numpy()

    def twin(self, device_tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(host, device) slices shaped as `device_tensor`, its values kept: the device
        slice replaces it, the host one is where a step writes it."""
        host, device = self.take(device_tensor.numel(), device_tensor.dtype)
        host, device = host.view(device_tensor.shape), device.view(device_tensor.shape)
        device.copy_(device_tensor)
        host.copy_(device_tensor.cpu())
        return host, device

    def flush(self) -> bool:
        """One host-to-device copy of the used span, when a step deferred its inputs."""
        if not self.deferred:
            return False
        self.deferred = False
        self.flushes += 1
        self.send(self.used)
        return True

    def send(self, nbytes: int) -> None:
        """One non_blocking copy of the arena's first `nbytes` to the device, the event
        recorded after it."""
        self.device[:nbytes].copy_(self.host[:nbytes], non_blocking=True)
        if self._event is not None:
            self._event.record()
            self._unordered = True

    def writable(self) -> None:
        """Before the host writes the arena: wait for its last copy to have run (its
        event), where one was sent since the last wait."""
        if self._unordered:
            self._event.synchronize()
            self._unordered = False
            self.waits += 1


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN
