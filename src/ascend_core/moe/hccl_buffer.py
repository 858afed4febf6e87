"""The HCCL buffer MC2 needs (HCCL_BUFFSIZE, MB), from CANN's aclnnMoeDistributeDispatchV2
constraints ("HCCL_BUFFSIZE" section of its op doc); the other methods have no floor:
HCCL moves larger all-to-all and all-gather payloads through its buffer in pieces."""

from __future__ import annotations

from ports.device import ChipFamily

# CANN's default when HCCL_BUFFSIZE is unset.
HCCL_BUFFSIZE_DEFAULT_MB = 200
_MB = 1024 * 1024
# MC2's shared-expert slot count (torch_npu's default shared_expert_num=1), which CANN's
# formula counts whether or not a rank computes shared experts.
SHARED_EXPERT_SLOTS = 1
# Bytes of one element of the tokens in CANN's formulas (bf16/fp16 activations).
TOKEN_BYTES = 2


def _align(value: int, to: int) -> int:
    return -(-value // to) * to


def mc2_buffer_mb(
    chip: ChipFamily,
    *,
    tokens_per_rank: int,
    ep_size: int,
    experts_per_rank: int,
    hidden_size: int,
    top_k: int,
    num_experts: int,
    hierarchy: bool = False,
) -> int:
    """The smallest HCCL_BUFFSIZE (MB) MC2 runs with.

    A3 (and A5, which has no published formula of its own):
      2 x (local x maxBs x EP x Align512(Align32(2H) + 64) + (K + shared) x maxBs x Align512(2H))
    A2, fullmesh: 2 x (Bs x EP x min(local, K) x H x 2 + 2 MB)
    A2, hierarchy: E x Bs x (H x 2 + 4 x Align8(K) x 4) + 4 MB + 100 MB
    """
    bs, h, k = tokens_per_rank, hidden_size, top_k
    if chip is ChipFamily.A2 and hierarchy:
        total = num_experts * bs * (h * TOKEN_BYTES + 4 * _align(k, 8) * 4) + 104 * _MB
    elif chip is ChipFamily.A2:
        total = 2 * (bs * ep_size * min(experts_per_rank, k) * h * TOKEN_BYTES + 2 * _MB)
    else:
        row = _align(_align(TOKEN_BYTES * h, 32) + 64, 512)
        total = 2 * (
            experts_per_rank * bs * ep_size * row
            + (k + SHARED_EXPERT_SLOTS) * bs * _align(TOKEN_BYTES * h, 512)
        )
        return max(2, -(-total // _MB))
    return -(-total // _MB)
