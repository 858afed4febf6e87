"""EPLB's logical -> physical expert map and load record, in torch ops both devices share.

vLLM maps a token's logical expert to one of its replicas (physical experts) and counts
the tokens each physical expert gets only in a Triton kernel for CUDA/ROCm/XPU; on other
platforms its `eplb_map_to_physical_and_record` returns the logical ids unchanged. Our
monolithic MoE method routes itself, so it maps and records here, with the same rule as
vLLM's kernel: the replica is (token index x Knuth's multiplier mod 2^32) mod the expert's
replica count, so a token's k choices spread over the replicas the same way on every rank;
padding rows (past `num_unpadded_tokens`) are not counted, nor anything while
`record_enabled` is false. Every shape follows the step's, nothing is read back to the
host: the map is captured in a graph and each replay reads the tables as they are, which
a rebalance updates in place.
"""

from __future__ import annotations

import torch

KNUTH_MULTIPLIER = 2654435769  # floor(2^32 / phi), vLLM's replica hash


def map_to_physical_and_record(
    topk_ids: torch.Tensor,
    logical_to_physical_map: torch.Tensor,
    logical_replica_count: torch.Tensor,
    expert_load_view: torch.Tensor,
    record_enabled: torch.Tensor,
    num_unpadded_tokens: torch.Tensor | None = None,
) -> torch.Tensor:
    """topk_ids [T, k] logical -> [T, k] physical (same dtype); adds each unpadded token's
    physical choices to expert_load_view [E_physical] when record_enabled."""
    if topk_ids.numel() == 0:
        return topk_ids
    tokens = topk_ids.shape[0]
    logical = topk_ids.long()
    replicas = logical_replica_count.long().index_select(0, logical.reshape(-1)).view_as(logical)
    token = torch.arange(tokens, device=topk_ids.device, dtype=torch.int64).unsqueeze(1)
    hashed = (token * KNUTH_MULTIPLIER) & 0xFFFFFFFF
    replica = hashed % replicas.clamp_min(1)
    slots = logical_to_physical_map.shape[1]
    physical = logical_to_physical_map.reshape(-1).long().index_select(
        0, (logical * slots + replica).reshape(-1)
    ).view_as(logical)
    counted = (physical >= 0) & record_enabled.to(torch.bool)
    if num_unpadded_tokens is not None:
        counted = counted & (token < num_unpadded_tokens.to(torch.int64))
    load = torch.zeros_like(expert_load_view)
    load.index_add_(
        0, physical.clamp_min(0).reshape(-1), counted.reshape(-1).to(expert_load_view.dtype)
    )
    expert_load_view.add_(load)
    return physical.to(topk_ids.dtype)
