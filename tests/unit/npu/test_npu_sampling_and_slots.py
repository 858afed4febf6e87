"""The NPU's sampling and slot-mapping ports are plain torch on the batch's tensors: the
same answers as the host's torch path (here on host tensors; the emulated device runs
them on `npu` tensors in the integration tests)."""

from __future__ import annotations

import torch

from adapters.cpu.sampling import CpuSamplingOps
from adapters.cpu.slot_mapping import CpuSlotMapping
from adapters.npu.sampling import NpuSamplingOps
from adapters.npu.slot_mapping import NpuSlotMapping


def test_greedy_is_torchs_argmax() -> None:
    x = torch.randn(5, 33, generator=torch.Generator().manual_seed(1))
    x[2, 4] = float("nan")
    got = NpuSamplingOps().greedy(x)
    assert got.dtype == torch.int64 and torch.equal(got, x.argmax(dim=-1))
    assert torch.equal(got, CpuSamplingOps(kernel=lambda: None).greedy(x))


def test_slot_mapping_matches_the_hosts_torch_path() -> None:
    gen = torch.Generator().manual_seed(2)
    lens, starts = [4, 1, 7], [0, 40, 13]
    qsl = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    positions = torch.cat([torch.arange(s, s + n) for s, n in zip(starts, lens, strict=True)])
    table = torch.randperm(64, generator=gen)[:18].reshape(3, 6).to(torch.int32)
    slots = []
    for port in (NpuSlotMapping(), CpuSlotMapping(kernel=lambda: None)):
        out = torch.full((16,), 7, dtype=torch.int64)
        port.compute(12, 14, qsl, positions, table, 6, out, 8, -1)
        slots.append(out)
    assert torch.equal(slots[0], slots[1])
    assert slots[0][12:].tolist() == [-1, -1, 7, 7]
    assert slots[0][0] == table[0, 0] * 8 and slots[0][4] == table[1, 40 // 8] * 8 + 40 % 8


def test_decode_slot_mapping_matches_the_hosts_torch_path() -> None:
    # One token a request (a decode step): the NPU's shorter way, the same slots.
    gen = torch.Generator().manual_seed(3)
    qsl = torch.arange(4, dtype=torch.int32)
    positions = torch.tensor([0, 47, 9], dtype=torch.int64)
    table = torch.randperm(64, generator=gen)[:18].reshape(3, 6).to(torch.int32)
    slots = []
    for port in (NpuSlotMapping(), CpuSlotMapping(kernel=lambda: None)):
        out = torch.full((6,), 7, dtype=torch.int64)
        port.compute(3, 5, qsl, positions, table, 6, out, 8, -1)
        slots.append(out)
    assert torch.equal(slots[0], slots[1])
    assert slots[0].tolist()[3:] == [-1, -1, 7]
    assert slots[0][1] == table[1, 47 // 8] * 8 + 47 % 8
