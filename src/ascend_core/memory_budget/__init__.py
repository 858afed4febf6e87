"""Device memory budget: weights, KV cache per token, what fits, and the smallest fix when not.

One source of the "KV cache cannot hold one sequence" message for the doctor and the worker.
"""

from __future__ import annotations

from ascend_core.memory_budget.budget import MemoryBudget, plan_budget
from ascend_core.memory_budget.demand import (
    MAX_SUGGESTED_TP,
    Accounting,
    BudgetFlag,
    MemoryDemand,
    Scaling,
)
from ascend_core.memory_budget.encoder import (
    PIXEL_NORM_BYTES,
    EncoderBudget,
    VisionGrid,
    encoder_budget,
    tower_bytes_per_patch,
)
from ascend_core.memory_budget.fixes import MAX_SUGGESTED_UTILIZATION, FixKind, MemoryFix
from ascend_core.memory_budget.host_default import (
    HOST_KV_CAP_BYTES,
    HOST_KV_SHARE,
    MOST_OF_HOST_RAM,
    VLLM_DEFAULT_UTILIZATION,
    HostKvDefault,
    SequenceCap,
    flags_leave_default,
    host_flag_warning,
    host_kv_default,
)
from ascend_core.memory_budget.reserve import (
    ACTIVATION_FACTOR,
    RUNTIME_RESERVE_BYTES,
    Reserve,
    estimate_reserve,
    lora_slot_bytes,
)
from ascend_core.memory_budget.shortfall import KvCacheTooSmallError, kv_cache_shortfall
from ascend_core.memory_budget.sizes import (
    NOMINAL_DEVICE_MEMORY,
    KvLayout,
    KvPerToken,
    WeightsSize,
    dtype_bytes,
    kv_bytes_per_token,
    weights_size,
)
from ascend_core.memory_budget.units import GIB, MIB, exact_bytes, format_bytes

__all__ = [
    "ACTIVATION_FACTOR",
    "GIB",
    "HOST_KV_CAP_BYTES",
    "HOST_KV_SHARE",
    "MAX_SUGGESTED_TP",
    "MAX_SUGGESTED_UTILIZATION",
    "MIB",
    "MOST_OF_HOST_RAM",
    "NOMINAL_DEVICE_MEMORY",
    "PIXEL_NORM_BYTES",
    "RUNTIME_RESERVE_BYTES",
    "VLLM_DEFAULT_UTILIZATION",
    "Accounting",
    "BudgetFlag",
    "EncoderBudget",
    "FixKind",
    "HostKvDefault",
    "KvCacheTooSmallError",
    "KvLayout",
    "KvPerToken",
    "MemoryBudget",
    "MemoryDemand",
    "MemoryFix",
    "Reserve",
    "Scaling",
    "SequenceCap",
    "VisionGrid",
    "WeightsSize",
    "dtype_bytes",
    "encoder_budget",
    "estimate_reserve",
    "exact_bytes",
    "flags_leave_default",
    "format_bytes",
    "host_flag_warning",
    "host_kv_default",
    "kv_bytes_per_token",
    "kv_cache_shortfall",
    "lora_slot_bytes",
    "plan_budget",
    "tower_bytes_per_patch",
    "weights_size",
]
