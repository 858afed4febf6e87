"""The single changes that make a device's KV cache hold one sequence, in preferred order."""

from __future__ import annotations

import enum
import math

import attrs
from attrs import frozen

from ascend_core.deployment import ModelFacts
from ascend_core.memory_budget.demand import Accounting, BudgetFlag, MemoryDemand, Scaling
from ascend_core.memory_budget.sizes import kv_bytes_per_token
from ascend_core.memory_budget.units import format_bytes

# The highest --gpu-memory-utilization we suggest: above it the runtime's own
# workspaces and fragmentation leave too little headroom to be a safe default.
MAX_SUGGESTED_UTILIZATION = 0.95


class FixKind(enum.Enum):
    """The changes the budget suggests, in the order it prefers them."""

    MEMORY_UTILIZATION = "gpu_memory_utilization"
    KV_CACHE_MEMORY_BYTES = "kv_cache_memory_bytes"
    MAX_MODEL_LEN = "max_model_len"
    TENSOR_PARALLEL = "tensor_parallel_size"
    QUANTIZATION = "quantization"


@frozen
class MemoryFix:
    """One change that makes the budget fit, with the numbers after it."""

    kind: FixKind
    argument: str  # what to pass to vllm serve, e.g. "--max-model-len 38912"
    value: int | float | str
    detail: str


def find_fixes(demand: MemoryDemand, scaling: Scaling | None = None) -> tuple[MemoryFix, ...]:
    """Every single change that makes `demand` fit, the preferred first.

    Without `scaling` only the two flags that need no model facts are searched.
    """
    first = (
        _raise_kv_bytes(demand)
        if demand.budget_flag is BudgetFlag.KV_CACHE_MEMORY_BYTES
        else _raise_utilization(demand)
    )
    fixes = [fix for fix in (first, _shorten(demand)) if fix is not None]
    if scaling is not None:
        fixes += [f for f in (_widen_tp(demand, scaling), _quantize(demand, scaling)) if f]
    return tuple(fixes)


def _raise_kv_bytes(d: MemoryDemand) -> MemoryFix:
    return MemoryFix(
        FixKind.KV_CACHE_MEMORY_BYTES,
        f"{BudgetFlag.KV_CACHE_MEMORY_BYTES.value} {d.sequence_bytes}",
        d.sequence_bytes,
        f"one sequence of max_model_len={d.max_model_len}: {format_bytes(d.sequence_bytes)}",
    )


def _raise_utilization(d: MemoryDemand) -> MemoryFix | None:
    if d.accounting is Accounting.MEASURED and d.reserve_bytes:
        # The device lacks free memory for the current share already; a larger share
        # of it would not be free either.
        return None
    needed = d.weights_bytes + d.reserve_bytes + d.sequence_bytes
    # Round up to a hundredth, then step until the integer truncation in usable_bytes agrees.
    util = math.ceil(needed / d.device_memory_bytes * 100) / 100
    while util <= MAX_SUGGESTED_UTILIZATION and not attrs.evolve(d, memory_utilization=util).fits:
        util = round(util + 0.01, 2)
    if util <= d.memory_utilization or util > MAX_SUGGESTED_UTILIZATION:
        return None
    after = attrs.evolve(d, memory_utilization=util)
    return MemoryFix(
        FixKind.MEMORY_UTILIZATION,
        f"--gpu-memory-utilization {util:.2f}",
        util,
        f"{format_bytes(after.kv_bytes_available)} for the KV cache, "
        f"{after.tokens} tokens = {after.tokens // d.max_model_len} sequence(s)",
    )


def _shorten(d: MemoryDemand) -> MemoryFix | None:
    if d.tokens < d.block_size:
        return None
    return MemoryFix(
        FixKind.MAX_MODEL_LEN,
        f"--max-model-len {d.tokens}",
        d.tokens,
        f"the longest sequence {format_bytes(d.kv_bytes_available)} of KV cache holds, "
        f"down from {d.max_model_len}",
    )


def _widen_tp(d: MemoryDemand, s: Scaling) -> MemoryFix | None:
    tp = s.tp * 2
    while tp <= s.max_tp:
        if _divides_heads(s.model, tp):
            after = attrs.evolve(
                d,
                weights_bytes=d.weights_bytes * s.tp // tp,
                kv_bytes_per_token=kv_bytes_per_token(s.model, s.kv_dtype_bytes, tp, s.pp).bytes,
            )
            if after.fits:
                return MemoryFix(
                    FixKind.TENSOR_PARALLEL,
                    f"--tensor-parallel-size {tp}",
                    tp,
                    f"{format_bytes(after.weights_bytes)} weights and "
                    f"{format_bytes(after.kv_bytes_per_token)}/token per device, "
                    f"{after.tokens} tokens = {after.tokens // d.max_model_len} sequence(s); "
                    f"needs {tp * s.pp} devices",
                )
        tp *= 2
    return None


def _divides_heads(model: ModelFacts, tp: int) -> bool:
    if model.num_attention_heads % tp:
        return False
    if model.mla is not None:
        return True
    if model.num_kv_heads >= tp:
        return model.num_kv_heads % tp == 0
    return tp % model.num_kv_heads == 0  # fewer KV heads than ranks: each is replicated


def _quantize(d: MemoryDemand, s: Scaling) -> MemoryFix | None:
    if s.weights_quantized:
        return None
    after = attrs.evolve(d, weights_bytes=d.weights_bytes // 2)
    if not after.fits:
        return None
    return MemoryFix(
        FixKind.QUANTIZATION,
        "--quantization ascend with a W8A8 checkpoint",
        "w8a8",
        f"int8 weights halve them to {format_bytes(after.weights_bytes)} per device, "
        f"{after.tokens} tokens = {after.tokens // d.max_model_len} sequence(s)",
    )
