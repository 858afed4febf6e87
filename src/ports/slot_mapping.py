"""Slot mapping: where each scheduled token's key and value go in the paged KV cache."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class SlotMapping(abc.ABC):
    """The step's flat cache slots, on the device that holds the batch."""

    @abc.abstractmethod
    def compute(
        self,
        num_tokens: int,
        max_num_tokens: int,
        query_start_loc: torch.Tensor,
        positions: torch.Tensor,
        block_table: torch.Tensor,
        block_table_stride: int,
        slot_mapping: torch.Tensor,
        block_size: int,
        pad_id: int,
    ) -> None:
        """Write slot_mapping[i] = block_table[r, p // block_size] * block_size + p % block_size
        for each scheduled token i (p = positions[i], r its request: tokens of request r are
        query_start_loc[r] .. query_start_loc[r+1]), and pad_id from num_tokens up to
        max_num_tokens; nothing past that. `block_table` is read flat, rows
        `block_table_stride` apart. No device-to-host read."""
