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
