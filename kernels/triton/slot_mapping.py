"""vLLM's slot mapping as one Triton launch: token -> KV-cache slot, pads set to PAD_ID.

Host reference: the torch ``compute_slot_mapping`` of the host adapter (today
``src/adapters/vllm/patches/kernel_bindings.py``, moving behind a ``ports`` role into
adapters/cpu and adapters/npu), which follows vLLM's ``ComputeSlotMappingKernel`` contract
(``vllm/v1/worker/block_table.py``) without context parallelism.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

# vLLM launches its kernel with 1024-token tiles; a tile is 8 KiB of int64 slots, far
# inside an Ascend vector core's unified buffer.
DEFAULT_BLOCK_SIZE = 1024


@triton.jit(do_not_specialize=["num_tokens", "max_num_tokens"])
def slot_mapping_kernel(
    num_reqs,
    num_tokens,
    max_num_tokens,
    query_start_loc_ptr,  # [num_reqs + 1] int32
    positions_ptr,  # [>= num_tokens] int64
    block_table_ptr,  # [max_num_reqs, block_table_stride] int32
    block_table_stride,
    slot_mapping_ptr,  # [>= max_num_tokens] int64
    KV_CACHE_BLOCK_SIZE: tl.constexpr,
    PAD_ID: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    # Programs 0..num_reqs-1 map one request each; program num_reqs writes the pads
    # (num_tokens..max_num_tokens), so a captured graph sees a fixed-size slot mapping.
    req = tl.program_id(0)
    if req == num_reqs:
        for start in range(num_tokens, max_num_tokens, BLOCK_SIZE):
            offs = start + tl.arange(0, BLOCK_SIZE)
            pads = tl.full([BLOCK_SIZE], PAD_ID, tl.int64)
            tl.store(slot_mapping_ptr + offs, pads, mask=offs < max_num_tokens)
    else:
        first = tl.load(query_start_loc_ptr + req)
        end = tl.load(query_start_loc_ptr + req + 1)
        row = req.to(tl.int64) * block_table_stride
        for start in range(first, end, BLOCK_SIZE):
            offs = start + tl.arange(0, BLOCK_SIZE)
            mask = offs < end
            pos = tl.load(positions_ptr + offs, mask=mask, other=0)
            block_idx = pos // KV_CACHE_BLOCK_SIZE
            block = tl.load(block_table_ptr + row + block_idx, mask=mask, other=0)
            offset = pos - block_idx * KV_CACHE_BLOCK_SIZE
            slots = block.to(tl.int64) * KV_CACHE_BLOCK_SIZE + offset
            tl.store(slot_mapping_ptr + offs, slots, mask=mask)


def compute_slot_mapping(
    num_reqs: int,
    num_tokens: int,
    max_num_tokens: int,
    query_start_loc: Any,
    positions: Any,
    block_table: Any,
    slot_mapping: Any,
    kv_cache_block_size: int,
    pad_id: int = -1,
    block_size: int = DEFAULT_BLOCK_SIZE,
    block_table_stride: int | None = None,
) -> None:
    """Fill ``slot_mapping[:max_num_tokens]`` in one launch of ``num_reqs + 1`` programs.

    Tensors as vLLM keeps them: ``query_start_loc`` int32, ``positions`` int64, a
    row-major int32 ``block_table`` (its row stride is read here unless
    ``block_table_stride`` gives it: the slot-mapping port's flat view) and an int64
    ``slot_mapping``, all on the launching device.
    """
    if block_table_stride is None and block_table.stride(1) != 1:
        raise ValueError(
            f"slot mapping: block_table must be contiguous in its rows, got strides "
            f"{tuple(block_table.stride())}; pass block_table.contiguous()"
        )
    slot_mapping_kernel[(num_reqs + 1,)](
        num_reqs,
        num_tokens,
        max_num_tokens,
        query_start_loc,
        positions,
        block_table,
        block_table.stride(0) if block_table_stride is None else block_table_stride,
        slot_mapping,
        KV_CACHE_BLOCK_SIZE=kv_cache_block_size,
        PAD_ID=pad_id,
        BLOCK_SIZE=block_size,
    )


# What scripts/kernels_check.py lowers: (case name, kernel, signature, constexprs).
_SIGNATURE = {
    "num_reqs": "i32",
    "num_tokens": "i32",
    "max_num_tokens": "i32",
    "query_start_loc_ptr": "*i32",
    "positions_ptr": "*i64",
    "block_table_ptr": "*i32",
    "block_table_stride": "i32",
    "slot_mapping_ptr": "*i64",
    "KV_CACHE_BLOCK_SIZE": "constexpr",
    "PAD_ID": "constexpr",
    "BLOCK_SIZE": "constexpr",
}
LOWERING_CASES = [
    (
        f"slot_mapping[kv_block={kv_block}]",
        slot_mapping_kernel,
        _SIGNATURE,
        {"KV_CACHE_BLOCK_SIZE": kv_block, "PAD_ID": -1, "BLOCK_SIZE": DEFAULT_BLOCK_SIZE},
    )
    for kv_block in (128,)
]
