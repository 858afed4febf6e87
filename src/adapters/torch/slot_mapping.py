"""The slot-mapping port's contract in torch ops, which both device adapters run where no
kernel of their own takes the call: tensor ops on the batch's device, no host read."""

from __future__ import annotations

import torch


def torch_slot_mapping(
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
    """ports.slot_mapping.SlotMapping.compute, vectorized."""
    qsl = query_start_loc.long()
    num_reqs = qsl.shape[0] - 1
    # vLLM passes the scheduled tokens' positions, so their count is num_tokens: no
    # read of query_start_loc back to the host (a device sync every step).
    total = num_tokens if num_reqs > 0 else 0
    slot_mapping[total:max_num_tokens].fill_(pad_id)
    if total == 0:
        return
    lens = qsl[1:] - qsl[:-1]
    req_of = torch.repeat_interleave(
        torch.arange(num_reqs, device=qsl.device), lens, output_size=total
    )
    pos = positions[:total].long()
    flat = block_table.reshape(-1)
    blocks = flat.index_select(0, req_of * block_table_stride + pos // block_size)
    slot_mapping[:total] = blocks.long() * block_size + pos % block_size
