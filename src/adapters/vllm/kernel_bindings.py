"""vLLM's Triton kernels as calls of our ports, for the host and the NPU (see
patches/torch_kernels): each takes the kernel's own argument names."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from ports.slot_mapping import SlotMapping


def slot_mapping_kernel(slots: SlotMapping) -> Callable[..., None]:
    """vLLM's ComputeSlotMappingKernel.kernel on the slot-mapping port."""

    def compute_slot_mapping(
        num_tokens: int,
        max_num_tokens: int,
        query_start_loc_ptr: torch.Tensor,
        positions_ptr: torch.Tensor,
        block_table_ptr: torch.Tensor,
        block_table_stride: int,
        slot_mapping_ptr: torch.Tensor,
        KV_CACHE_BLOCK_SIZE: int,
        TOTAL_CP_WORLD_SIZE: int = 1,
        TOTAL_CP_RANK: int = 0,
        CP_KV_CACHE_INTERLEAVE_SIZE: int = 1,
        PAD_ID: int = -1,
        BLOCK_SIZE: int = 1024,
    ) -> None:
        """The Triton kernel's contract: tokens of request r are query_start_loc[r] ..
        query_start_loc[r+1]; slots past the scheduled tokens up to max_num_tokens are
        PAD_ID. BLOCK_SIZE is the kernel's launch tile, of no meaning here."""
        if TOTAL_CP_WORLD_SIZE != 1:
            raise NotImplementedError("context parallelism is not supported on this device")
        slots.compute(
            num_tokens,
            max_num_tokens,
            query_start_loc_ptr,
            positions_ptr,
            block_table_ptr,
            block_table_stride,
            slot_mapping_ptr,
            KV_CACHE_BLOCK_SIZE,
            PAD_ID,
        )

    return compute_slot_mapping
