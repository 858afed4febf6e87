"""The host's native slot mapping: the slot-mapping port's contract (ports/slot_mapping.py),
the same slots as the torch version and as a per-token reference, padding included."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from adapters.cpu import native
from adapters.cpu.slot_mapping import CpuSlotMapping
from support.native_kernels import built_or_skip

BLOCK = 16
PAD = -1


@pytest.fixture(scope="module")
def op() -> Any:
    return built_or_skip(native.compute_slot_mapping(), "slot mapping", "the torch version")


def _batch(lens: list[int], starts: list[int], index: torch.dtype) -> dict[str, Any]:
    """Requests of `lens` scheduled tokens from positions `starts`, each with its own
    shuffled blocks in a 6-block-wide table."""
    gen = torch.Generator().manual_seed(sum(lens) + len(lens))
    qsl = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    positions = torch.cat([torch.arange(s, s + n) for s, n in zip(starts, lens, strict=True)]).to(
        index
    )
    table = torch.randperm(128, generator=gen)[: len(lens) * 6].reshape(len(lens), 6).to(index)
    return {"qsl": qsl, "positions": positions, "table": table}


def _reference(batch: dict[str, Any], num_tokens: int, max_tokens: int) -> list[int]:
    slots = [PAD] * max_tokens
    qsl = batch["qsl"].tolist()
    for r in range(len(qsl) - 1):
        for i in range(qsl[r], min(qsl[r + 1], num_tokens)):
            p = int(batch["positions"][i])
            slots[i] = int(batch["table"][r, p // BLOCK]) * BLOCK + p % BLOCK
    return slots


def _run(
    port: CpuSlotMapping,
    batch: dict[str, Any],
    num_tokens: int,
    max_tokens: int,
    slots: torch.Tensor,
) -> None:
    port.compute(
        num_tokens,
        max_tokens,
        batch["qsl"],
        batch["positions"],
        batch["table"],
        batch["table"].stride(0),
        slots,
        BLOCK,
        PAD,
    )


@pytest.mark.parametrize("index", [torch.int32, torch.int64])
@pytest.mark.parametrize(
    ("lens", "starts"),
    [
        ([1] * 16, [0, 5, 17, 31, 40, 63, 64, 70, 80, 90, 15, 16, 33, 2, 3, 95]),
        ([64, 1, 30], [0, 70, 12]),
        ([5], [91]),
    ],
)
def test_the_native_kernel_gives_the_torch_versions_slots(
    op: Any, index: torch.dtype, lens: list[int], starts: list[int]
) -> None:
    batch = _batch(lens, starts, index)
    num_tokens, max_tokens = sum(lens), sum(lens) + 7
    native_slots = torch.full((max_tokens + 3,), 99, dtype=torch.int64)
    _run(CpuSlotMapping(kernel=lambda: op), batch, num_tokens, max_tokens, native_slots)
    torch_slots = torch.full((max_tokens + 3,), 99, dtype=torch.int64)
    _run(CpuSlotMapping(kernel=lambda: None), batch, num_tokens, max_tokens, torch_slots)
    assert torch.equal(native_slots, torch_slots)
    assert native_slots[:max_tokens].tolist() == _reference(batch, num_tokens, max_tokens)
    assert native_slots[max_tokens:].tolist() == [99] * 3  # nothing written past the padding


def test_the_kernel_writes_int32_slots_and_pads_an_empty_batch(op: Any) -> None:
    batch = _batch([3, 2], [0, 20], torch.int64)
    slots = torch.zeros(8, dtype=torch.int32)
    op(5, 8, batch["qsl"], batch["positions"], batch["table"], 6, slots, BLOCK, PAD)
    assert slots.tolist() == _reference(batch, 5, 8)
    empty = torch.zeros(4, dtype=torch.int64)
    op(
        0,
        4,
        torch.zeros(1, dtype=torch.int32),
        batch["positions"],
        batch["table"],
        6,
        empty,
        BLOCK,
        PAD,
    )
    assert empty.tolist() == [PAD] * 4


@pytest.mark.parametrize(
    ("lens", "position"),
    [
        ([2], 6 * BLOCK * 2),  # past the whole table
        ([2, 1], 6 * BLOCK),  # past its own row, inside the next request's
    ],
    ids=["past-the-table", "into-the-next-row"],
)
def test_a_position_past_its_block_table_is_an_error_not_a_stray_read(
    op: Any, lens: list[int], position: int
) -> None:
    batch = _batch(lens, [0] * len(lens), torch.int64)
    batch["positions"][1] = position  # the first request's second token
    with pytest.raises(RuntimeError, match="past its block table"):
        op(
            sum(lens),
            sum(lens),
            batch["qsl"],
            batch["positions"],
            batch["table"],
            6,
            torch.zeros(sum(lens), dtype=torch.int64),
            BLOCK,
            PAD,
        )


def test_a_float_index_tensor_is_refused_with_the_contract(op: Any) -> None:
    batch = _batch([2], [0], torch.int64)
    with pytest.raises(RuntimeError, match="compute_slot_mapping: takes"):
        op(
            2,
            2,
            batch["qsl"].float(),
            batch["positions"],
            batch["table"],
            6,
            torch.zeros(2, dtype=torch.int64),
            BLOCK,
            PAD,
        )
