"""EPLB's logical -> physical map and load record (adapters/torch/eplb_map.py): vLLM's
replica rule (Knuth's hash of the token index), padding rows and a record switched off
not counted."""

from __future__ import annotations

import torch

from adapters.torch.eplb_map import KNUTH_MULTIPLIER, map_to_physical_and_record

# 4 logical experts over 6 physical slots: expert 0 at {0, 4}, expert 2 at {2, 5}.
LOGICAL_TO_PHYSICAL = torch.tensor([[0, 4], [1, -1], [2, 5], [3, -1]])
REPLICAS = torch.tensor([2, 1, 2, 1])


def run(ids: list[list[int]], record: bool = True, unpadded: int | None = None):
    load = torch.zeros(6, dtype=torch.int64)
    physical = map_to_physical_and_record(
        torch.tensor(ids, dtype=torch.int32), LOGICAL_TO_PHYSICAL, REPLICAS, load,
        torch.tensor(record), None if unpadded is None else torch.tensor(unpadded),
    )
    return physical, load


def test_each_token_takes_the_replica_its_index_hashes_to():
    ids = [[0, 1], [0, 2], [2, 3], [0, 3]]
    physical, load = run(ids)
    assert physical.dtype == torch.int32
    for token, row in enumerate(ids):
        for k, logical in enumerate(row):
            replica = ((token * KNUTH_MULTIPLIER) & 0xFFFFFFFF) % int(REPLICAS[logical])
            assert int(physical[token, k]) == int(LOGICAL_TO_PHYSICAL[logical, replica])
    assert sorted(set(physical[:, 0].tolist())) == [0, 2, 4]  # both replicas of 0 in use
    assert load.tolist() == torch.bincount(physical.reshape(-1).long(), minlength=6).tolist()


def test_padding_rows_and_a_disabled_record_count_nothing():
    _, load = run([[0, 1], [2, 3], [1, 3]], unpadded=2)
    assert int(load.sum()) == 4 and int(load[1]) == 1 and int(load[3]) == 1
    physical, off = run([[0, 1]], record=False)
    assert int(off.sum()) == 0 and physical.shape == (1, 2)


def test_an_empty_step_returns_its_ids():
    physical, load = run([])
    assert physical.numel() == 0 and int(load.sum()) == 0
