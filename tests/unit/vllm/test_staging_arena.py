"""The staging arena: a step's small inputs as slices of one host buffer and one device
buffer, sent in one copy only when a step deferred them (on the host device here: the
arena's copy is the same op on any device)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from adapters.vllm.worker.staging_arena import ALIGN, StagingArena


def _buffer(*shape: int, dtype: torch.dtype) -> SimpleNamespace:
    """vLLM's CpuGpuBuffer as the arena sees it: cpu, gpu and np halves."""
    cpu = torch.arange(torch.Size(shape).numel()).reshape(shape).to(dtype)
    return SimpleNamespace(cpu=cpu, gpu=cpu.clone(), np=cpu.numpy())


def test_bound_buffers_keep_their_values_and_go_in_one_copy() -> None:
    arena = StagingArena(4096, torch.device("cpu"))
    mask, table = _buffer(9, dtype=torch.bool), _buffer(3, 5, dtype=torch.int32)
    arena.bind(mask)
    arena.bind(table)
    host, device = arena.twin(torch.arange(7))
    assert table.gpu.tolist() == torch.arange(15).reshape(3, 5).tolist()
    assert device.tolist() == host.tolist() == list(range(7))
    # Every slice aligned for its type; the halves share the arenas' memory.
    for t in (mask.gpu, table.gpu, device):
        assert (t.data_ptr() - arena.device.data_ptr()) % ALIGN == 0
    table.np[1, 2], host[3] = 70, 42
    mask.np[2] = False
    assert not arena.flush()  # no step deferred: nothing sent
    assert table.gpu[1, 2] == 7 and device[3] == 3
    arena.deferred = True
    assert arena.flush() and not arena.deferred and arena.flushes == 1
    assert table.gpu[1, 2] == 70 and device[3] == 42 and not mask.gpu[2]


def test_an_arena_too_small_says_so() -> None:
    arena = StagingArena(64, torch.device("cpu"))
    arena.take(8, torch.int64)
    with pytest.raises(RuntimeError, match="holds 64 bytes; 65 were asked"):
        arena.take(1, torch.int8)


class _Event:
    """A device event as the arena uses it: what was recorded and waited for."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def record(self) -> None:
        self.calls.append("record")

    def synchronize(self) -> None:
        self.calls.append("synchronize")


def test_a_host_arena_orders_nothing() -> None:
    """The host's arena copies at once: its event is neither recorded nor waited for (a
    device arena's ordering is checked on the emulated NPU, tests/integration/npu_ops)."""
    event = _Event()
    arena = StagingArena(256, torch.device("cpu"), event=event)
    arena.send(64)
    arena.writable()
    assert event.calls == [] and arena.waits == 0
