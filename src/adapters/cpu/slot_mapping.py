"""The slot-mapping port on the host: the native kernel where built, else torch ops."""

from __future__ import annotations

from collections.abc import Callable

import torch

from adapters.cpu import native
from adapters.torch.slot_mapping import torch_slot_mapping
from ports.slot_mapping import SlotMapping


class CpuSlotMapping(SlotMapping):
    """One pass in C++ (native.compute_slot_mapping) for contiguous int32/int64 host
    tensors, where the torch version is nine op calls; torch_slot_mapping otherwise.
    `kernel` is the native build's accessor (tests hand in their own)."""

    def __init__(
        self, kernel: Callable[[], Callable[..., None] | None] = native.compute_slot_mapping
    ) -> None:
        self._kernel = kernel

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
        if slot_mapping.device.type == "cpu" and native_takes(
            query_start_loc, positions, block_table, slot_mapping
        ):
            # Looked up at the call: the native build loads with the model, not before.
            kernel = self._kernel()
            if kernel is not None:
                kernel(
                    num_tokens,
                    max_num_tokens,
                    query_start_loc,
                    positions,
                    block_table,
                    block_table_stride,
                    slot_mapping,
                    block_size,
                    pad_id,
                )
                return
        torch_slot_mapping(
            num_tokens,
            max_num_tokens,
            query_start_loc,
            positions,
            block_table,
            block_table_stride,
            slot_mapping,
            block_size,
            pad_id,
        )


def native_takes(*tensors: torch.Tensor) -> bool:
    """Whether the native slot-mapping kernel takes these: contiguous int32/int64."""
    return all(t.is_contiguous() and t.dtype in (torch.int32, torch.int64) for t in tensors)
