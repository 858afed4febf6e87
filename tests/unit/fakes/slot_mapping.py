"""FakeSlotMapping: the slot-mapping port that records its calls and writes pad_id."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ports.slot_mapping import SlotMapping

if TYPE_CHECKING:
    import torch


class FakeSlotMapping(SlotMapping):
    """Each call's scalar arguments in `calls`; every slot up to max_num_tokens := pad_id."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

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
        self.calls.append(
            {
                "num_tokens": num_tokens,
                "max_num_tokens": max_num_tokens,
                "block_table_stride": block_table_stride,
                "block_size": block_size,
                "pad_id": pad_id,
            }
        )
        slot_mapping[:max_num_tokens].fill_(pad_id)
