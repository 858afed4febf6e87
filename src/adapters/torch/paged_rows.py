"""Paged-cache index arithmetic the device adapters share: plain tensor indexing, no ops."""

from __future__ import annotations

import torch

from ports.ops import AttentionPart

Rows = tuple[torch.Tensor, torch.Tensor]  # (block ids, offsets in the block), int64


Positions = tuple[Rows, torch.Tensor | None]  # (block, offset) of kept slots, kept indices


def slot_positions(slot_mapping: torch.Tensor, block_size: int) -> Positions:
    """The (block, offset) of each written slot, skipping slots of -1, and which of the
    token rows those are (None: all). Reads one flag back: whether any slot is -1."""
    slots = slot_mapping.reshape(-1).long()
    keep = None
    valid = slots >= 0
    if not bool(valid.all()):
        keep = valid.nonzero().squeeze(1)
        slots = slots.index_select(0, keep)
    blocks = torch.div(slots, block_size, rounding_mode="floor")
    return (blocks, slots - blocks * block_size), keep


# vLLM's NULL_BLOCK_ID (vllm.v1.attention.backends.utils): block 0 of every KV cache is
# never a request's; vLLM reserves it for padding (its runner points padded block-table
# rows at it). A padding token's row may be written there and is never read.
PAD_BLOCK = 0


def padding_to_null_block(slot_mapping: torch.Tensor) -> torch.Tensor:
    """Flat int64 slots with vLLM's padding (-1) sent to slot 0, the first of PAD_BLOCK:
    one clamp on the device (PAD_BLOCK is block 0, so its first slot is the lowest; a
    request's slots are all above it), nothing read back, so it fits in an NPU graph."""
    return slot_mapping.reshape(-1).long().clamp_min(PAD_BLOCK)


def rows_at(
    positions: Positions, n: int, *values: torch.Tensor
) -> tuple[Rows, tuple[torch.Tensor, ...]]:
    """Each value's rows [n, -1] for the kept slots of `positions` (n = len(slot_mapping));
    value rows past n are padding, dropped."""
    at, keep = positions
    kept = tuple(v[:n].reshape(n, -1) for v in values)
    if keep is not None:
        kept = tuple(v.index_select(0, keep) for v in kept)
    return at, kept


def slot_rows(
    slot_mapping: torch.Tensor, block_size: int, *values: torch.Tensor
) -> tuple[Rows, tuple[torch.Tensor, ...]]:
    """The (block, offset) of each written slot, and each value's rows for them, [n, -1].

    Slots of -1 are skipped; value rows past len(slot_mapping) are padding, dropped.
    """
    positions = slot_positions(slot_mapping, block_size)
    return rows_at(positions, slot_mapping.numel(), *values)


def sequence_rows(
    block_table: torch.Tensor, seq_lens: torch.Tensor, block_size: int, total: int
) -> Rows:
    """(block, offset) of positions 0 .. seq_len - 1 of each sequence, concatenated;
    `total` is sum(seq_lens), given from the host (nothing is read back)."""
    lens = seq_lens.long()
    seq_of = torch.repeat_interleave(
        torch.arange(lens.shape[0], device=lens.device), lens, output_size=total
    )
    starts = torch.cumsum(lens, 0) - lens
    pos = torch.arange(total, device=lens.device) - starts.index_select(0, seq_of)
    blocks = block_table.long()[seq_of, torch.div(pos, block_size, rounding_mode="floor")]
    return blocks, pos % block_size


def gather_planes(planes: tuple[torch.Tensor, ...], part: AttentionPart) -> torch.Tensor:
    """Each of the part's sequences' rows of every cache plane [blocks, block_size, ...],
    side by side on the last dim, sequences concatenated: plain indexing, the same on
    every device."""
    total = sum(part.actual_seq_lens)
    at = sequence_rows(part.block_table, part.seq_lens, planes[0].shape[1], total)
    return torch.cat([plane[at] for plane in planes], dim=-1)
