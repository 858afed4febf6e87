"""The slot-mapping Triton kernel under the interpreter, against the contract token by token."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from kernels.triton import load_interpreted

PAD = -1


@pytest.fixture(scope="module")
def kernel() -> ModuleType:
    return load_interpreted("kernels.triton.slot_mapping")


def expected_slots(
    query_start_loc: list[int],
    positions: list[int],
    block_table: torch.Tensor,
    kv_block: int,
    max_num_tokens: int,
) -> list[int]:
    """vLLM's contract, one token at a time: slot = table[req, pos // kv_block] * kv_block
    + pos % kv_block for the scheduled tokens, PAD after them."""
    slots = [PAD] * max_num_tokens
    for req in range(len(query_start_loc) - 1):
        for tok in range(query_start_loc[req], query_start_loc[req + 1]):
            pos = positions[tok]
            slots[tok] = int(block_table[req, pos // kv_block]) * kv_block + pos % kv_block
    return slots


def run(
    kernel: ModuleType,
    lens: list[int],
    starts: list[int],
    kv_block: int,
    max_num_tokens: int,
    table_width: int = 8,
    tile: int = 4,
    base: int = 0,
) -> None:
    """Lay out requests of ``lens`` tokens whose first position is ``starts``; run; compare."""
    gen = torch.Generator().manual_seed(len(lens) * 31 + kv_block)
    qsl = [0]
    positions: list[int] = []
    for n, s in zip(lens, starts, strict=True):
        qsl.append(qsl[-1] + n)
        positions.extend(range(s, s + n))
    num_reqs, num_tokens = len(lens), qsl[-1]
    # More rows than requests, as vLLM's persistent block table has.
    table = torch.randint(0, 1000, (num_reqs + 2, table_width), generator=gen, dtype=torch.int32)
    table += base
    slot_mapping = torch.full((max_num_tokens + 3,), 12345, dtype=torch.int64)
    kernel.compute_slot_mapping(
        num_reqs,
        num_tokens,
        max_num_tokens,
        torch.tensor(qsl, dtype=torch.int32),
        torch.tensor(positions + [0] * 5, dtype=torch.int64),  # vLLM's buffer is longer
        table,
        slot_mapping,
        kv_block,
        pad_id=PAD,
        block_size=tile,
    )
    want = expected_slots(qsl, positions, table, kv_block, max_num_tokens)
    assert slot_mapping[:max_num_tokens].tolist() == want
    # Nothing past max_num_tokens is written.
    assert slot_mapping[max_num_tokens:].tolist() == [12345] * 3


def test_prefill_and_decode_mixed_across_tile_and_kv_block_edges(kernel: ModuleType) -> None:
    # Request lengths 1, tile-1, tile, tile+1 and 2*tile+1; starts on, before and after
    # a KV-block edge (kv_block 4: positions 3|4, 7|8).
    run(kernel, lens=[1, 3, 4, 5, 9], starts=[7, 0, 3, 14, 4], kv_block=4, max_num_tokens=30)


def test_pads_longer_than_a_tile(kernel: ModuleType) -> None:
    run(kernel, lens=[2, 1], starts=[5, 30], kv_block=16, max_num_tokens=19)


def test_no_pads_when_the_batch_is_full(kernel: ModuleType) -> None:
    run(kernel, lens=[4, 4], starts=[0, 60], kv_block=16, max_num_tokens=8)


def test_no_requests_pads_everything(kernel: ModuleType) -> None:
    run(kernel, lens=[], starts=[], kv_block=16, max_num_tokens=9)


def test_slots_past_int32_stay_exact(kernel: ModuleType) -> None:
    # Block ids near 2**25 with 128-token blocks: slots near 2**32, in int64.
    run(kernel, lens=[3, 2], starts=[126, 250], kv_block=128, max_num_tokens=6, base=2**25)


def test_column_strided_block_table_is_refused_with_the_fix(kernel: ModuleType) -> None:
    table = torch.zeros(4, 8, dtype=torch.int32)[:, ::2]
    with pytest.raises(ValueError, match=r"contiguous\(\)"):
        kernel.compute_slot_mapping(
            1,
            1,
            1,
            torch.tensor([0, 1], dtype=torch.int32),
            torch.zeros(1, dtype=torch.int64),
            table,
            torch.zeros(1, dtype=torch.int64),
            16,
        )
