"""The NPU's sampling and slot-mapping ports are plain torch on the batch's tensors: the
same answers as the host's torch path (here on host tensors; the emulated device runs
them on `npu` tensors in the integration tests)."""

from __future__ import annotations

import torch

from adapters.cpu.sampling import CpuSamplingOps
from adapters.cpu.slot_mapping import CpuSlotMapping
from adapters.npu.sampling import NpuSamplingOps
from adapters.npu.slot_mapping import NpuSlotMapping
from adapters.torch.counter_noise import row_keys


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



def _keys(seeds: list[int], counters: list[int]) -> torch.Tensor:
    return row_keys(torch.tensor(seeds, dtype=torch.int64), torch.tensor(counters))


def test_counter_noise_is_the_hosts_bits_and_a_function_of_its_rows_keys_only() -> None:
    keys = _keys([7, 7, 7, 2**62 + 7, -3], [10, 11, 10, 10, 10])
    assert keys.dtype == torch.int64 and bool(((keys >= 0) & (keys < 2**32)).all())
    npu = NpuSamplingOps().exponential_noise(keys, 1000)
    host = CpuSamplingOps(kernel=lambda: None).exponential_noise(keys, 1000)
    assert npu.dtype == torch.float32 and npu.shape == (5, 1000)
    assert torch.equal(npu, host)
    # The same (seed, counter) the same row, alone or in any batch; any other key differs:
    # the counter, the seed's high bits, a negative seed.
    alone = NpuSamplingOps().exponential_noise(_keys([7], [10]), 1000)
    assert torch.equal(npu[0], alone[0]) and torch.equal(npu[0], npu[2])
    for other in (1, 3, 4):
        assert (npu[0] != npu[other]).float().mean() > 0.99


def test_counter_noise_is_exponential_with_mean_and_spread_one() -> None:
    keys = _keys(list(range(64)), [5] * 64)
    q = NpuSamplingOps().exponential_noise(keys, 4096)
    assert bool((q > 0).all()) and bool(torch.isfinite(q).all())
    assert abs(q.mean().item() - 1.0) < 0.01 and abs(q.std().item() - 1.0) < 0.02
    # P(q > 1) = 1/e; neighbouring tokens and rows uncorrelated; no token favoured.
    assert abs((q > 1).float().mean().item() - 0.3679) < 0.01
    assert abs(torch.corrcoef(torch.stack([q[:, :-1].flatten(), q[:, 1:].flatten()]))[0, 1]) < 0.02
    assert abs(torch.corrcoef(torch.stack([q[:-1].flatten(), q[1:].flatten()]))[0, 1]) < 0.02
    assert len(set(q.argmax(dim=-1).tolist())) > 50
