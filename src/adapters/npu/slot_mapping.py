"""The slot-mapping port on the NPU: torch ops on the device (no read back to the host)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.slot_mapping import torch_slot_mapping
from ports.slot_mapping import SlotMapping

if TYPE_CHECKING:
    import torch


class NpuSlotMapping(SlotMapping):
    """torch_slot_mapping on the batch's device tensors; no torch_npu call of its own, so
    serving does not depend on triton-ascend compiling vLLM's CUDA-tuned kernel."""

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
