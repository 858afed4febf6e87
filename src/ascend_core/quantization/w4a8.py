"""Whether W4A8_DYNAMIC linear layers fit a tensor-parallel split and the device's int4
layout: the sizes serve's linear method checks as it builds each layer, checked by the plan
from config.json's sizes so that `ascend-doctor plan` says the same before anything loads."""

from __future__ import annotations

from collections.abc import Sequence

from ascend_core.quantization.fp8 import Projection
from ports.device import DeviceKind

# A row-parallel layer's scale_bias holds this many partial sums over equal input slices
# (ModelSlim version 1.0.0); each rank sums the slices of its input shard.
ROW_SLICES = 16
PAIR = 2  # int4 values per int8 byte, along the outputs
NPU_PACK = 8  # int4 values per int32 along the outputs (npu_convert_weight_to_int4pack)
NPU_MAX_DIM = 65536  # npu_grouped_matmul's inner dimensions stay below this


def w4a8_split_problem(projections: Sequence[Projection], tp: int, device: DeviceKind
                       ) -> str | None:
    """Why these W4A8_DYNAMIC layers cannot be served split over `tp` ranks on `device`, or
    None."""
    for p in projections:
        if p.row_parallel and ROW_SLICES % tp:
            return (f"{p.name} splits its inputs over {tp} ranks, and its scale_bias holds "
                    f"{ROW_SLICES} slices of them, which {tp} ranks cannot share")
        shards = p.slices(tp)
        odd = next((s for s in shards if s % PAIR), None)
        if odd is not None:
            return (f"{p.name} has a shard of {odd} output features per rank, not even (each "
                    "byte holds two output channels)")
        if device is not DeviceKind.NPU:
            continue
        n, k = sum(shards), (p.input // tp if p.row_parallel else p.input)
        if n % NPU_PACK:
            return (f"{p.name} has {n} output features per rank, not a multiple of "
                    f"{NPU_PACK} (the NPU packs eight int4 values per int32 along them)")
        if n >= NPU_MAX_DIM or k >= NPU_MAX_DIM:
            return (f"{p.name} is [{n}, {k}] per rank, and npu_grouped_matmul takes inner "
                    f"dimensions below {NPU_MAX_DIM}")
    return None
