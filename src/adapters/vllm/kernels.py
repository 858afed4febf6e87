"""Torch versions of vLLM's Triton kernels, for the host and the NPU (see patches/torch_kernels)."""

from __future__ import annotations

import torch


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
    """slot = block_table[req, pos // block_size] * block_size + pos % block_size, vectorized.

    Same contract as the Triton kernel: tokens of request r are query_start_loc[r] ..
    query_start_loc[r+1]; slots past the scheduled tokens up to max_num_tokens are PAD_ID.
    """
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("context parallelism is not supported on this device")
    if slot_mapping_ptr.device.type == "cpu" and _host_kernel(
        query_start_loc_ptr, positions_ptr, block_table_ptr, slot_mapping_ptr
    ):
        from adapters.cpu import native

        kernel = native.compute_slot_mapping()
        if kernel is not None:  # one pass in C++, where the torch ops below are nine calls
            kernel(
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
            return
    qsl = query_start_loc_ptr.long()
    num_reqs = qsl.shape[0] - 1
    # vLLM passes the scheduled tokens' positions, so their count is num_tokens: no
    # read of query_start_loc back to the host (a device sync every step).
    total = num_tokens if num_reqs > 0 else 0
    slot_mapping_ptr[total:max_num_tokens].fill_(PAD_ID)
    if total == 0:
        return
    lens = qsl[1:] - qsl[:-1]
    req_of = torch.repeat_interleave(
        torch.arange(num_reqs, device=qsl.device), lens, output_size=total
    )
    pos = positions_ptr[:total].long()
    flat = block_table_ptr.reshape(-1)
    blocks = flat.index_select(0, req_of * block_table_stride + pos // KV_CACHE_BLOCK_SIZE)
    slot_mapping_ptr[:total] = blocks.long() * KV_CACHE_BLOCK_SIZE + pos % KV_CACHE_BLOCK_SIZE


def _host_kernel(*tensors: torch.Tensor) -> bool:
    """Whether the native slot-mapping kernel takes these: contiguous int32/int64."""
    return all(t.is_contiguous() and t.dtype in (torch.int32, torch.int64) for t in tensors)
