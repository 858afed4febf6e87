"""Paged-cache index arithmetic the device adapters share: plain tensor indexing, no ops."""

from __future__ import annotations

import torch

Rows = tuple[torch.Tensor, torch.Tensor]  # (block ids, offsets in the block), int64


def slot_rows(
    slot_mapping: torch.Tensor, block_size: int, *values: torch.Tensor
) -> tuple[Rows, tuple[torch.Tensor, ...]]:
    """The (block, offset) of each written slot, and each value's rows for them, [n, -1].

    Slots of -1 are skipped; value rows past len(slot_mapping) are padding, dropped.
    """
    slots = slot_mapping.reshape(-1).long()
    n = slots.shape[0]
    kept = tuple(v[:n].reshape(n, -1) for v in values)
    valid = slots >= 0
    if not bool(valid.all()):
        keep = valid.nonzero().squeeze(1)
        slots = slots.index_select(0, keep)
        kept = tuple(v.index_select(0, keep) for v in kept)
    blocks = torch.div(slots, block_size, rounding_mode="floor")
    return (blocks, slots - blocks * block_size), kept


def sequence_rows(block_table: torch.Tensor, seq_lens: torch.Tensor, block_size: int) -> Rows:
    """(block, offset) of positions 0 .. seq_len - 1 of each sequence, concatenated."""
    lens = seq_lens.long().to(block_table.device)
    total = int(lens.sum())
    seq_of = torch.repeat_interleave(
        torch.arange(lens.shape[0], device=lens.device), lens, output_size=total
    )
    starts = torch.cumsum(lens, 0) - lens
    pos = torch.arange(total, device=lens.device) - starts.index_select(0, seq_of)
    blocks = block_table.long()[seq_of, torch.div(pos, block_size, rounding_mode="floor")]
    return blocks, pos % block_size
