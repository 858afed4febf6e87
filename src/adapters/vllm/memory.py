"""How many bytes the KV cache gets, from the device runtime's memory figures and the flags.

Whether one sequence fits is the core's memory budget (`kv_cache_shortfall`), the same
arithmetic and message the doctor gives; this module adds the exact byte counts and
the flag that set the budget.
"""

from __future__ import annotations

import math

from attrs import frozen

from ascend_core.errors import ConfigError
from ascend_core.memory_budget import MemoryDemand, kv_cache_shortfall
from ports.runtime import MemoryInfo

_GIB = 1 << 30


def _gib(n: int) -> str:
    return f"{n / _GIB:.2f} GiB"


@frozen
class KvCacheBudget:
    kv_cache_bytes: int
    reason: str


def kv_cache_budget(
    memory: MemoryInfo,
    utilization: float,
    explicit_bytes: int | None,
    one_sequence_bytes: int,
    max_model_len: int,
    block_size: int = 1,
) -> KvCacheBudget:
    """--kv-cache-memory-bytes when given, else utilization x total minus what this process holds.

    Raises ConfigError (numbers and the flag to change) when the result cannot hold
    one sequence of max_model_len tokens or exceeds free memory.
    """
    if explicit_bytes:
        budget = int(explicit_bytes)
        flag = "--kv-cache-memory-bytes"
        reason = f"KV cache: {_gib(budget)} as set by --kv-cache-memory-bytes"
        if budget > memory.free_bytes:
            raise ConfigError(
                f"--kv-cache-memory-bytes={budget} ({_gib(budget)}) exceeds the "
                f"{_gib(memory.free_bytes)} free of {_gib(memory.total_bytes)} on the device.",
                f"lower --kv-cache-memory-bytes below {memory.free_bytes}",
            )
        # The flag is the whole budget: nothing is taken off it.
        demand_memory, demand_utilization, held, capped = max(budget, 1), 1.0, 0, 0
    else:
        allowed = int(memory.total_bytes * utilization)
        held = memory.peak_allocated_bytes
        budget = min(allowed - held, memory.free_bytes)
        capped = max(0, allowed - held - memory.free_bytes)  # free memory is the limit
        flag = "--gpu-memory-utilization"
        demand_memory, demand_utilization = memory.total_bytes, utilization
        reason = (
            f"KV cache: {_gib(max(budget, 0))} = {utilization} x {_gib(memory.total_bytes)} "
            f"(--gpu-memory-utilization of device memory) - {_gib(held)} already in use"
        )
    blocks = math.ceil(max_model_len / block_size)
    demand = MemoryDemand(
        device_memory_bytes=demand_memory,
        memory_utilization=demand_utilization,
        weights_bytes=held,  # weights and the profiled peak, as the process holds them
        reserve_bytes=capped,
        kv_bytes_per_token=max(1, one_sequence_bytes // (blocks * block_size)),
        max_model_len=max_model_len,
        block_size=block_size,
    )
    shortfall = kv_cache_shortfall(demand)
    if shortfall is not None:
        raise ConfigError(
            f"{shortfall.what} In bytes: the KV cache gets {max(budget, 0)} from {flag}; "
            f"one sequence of max_model_len={max_model_len} needs {one_sequence_bytes}.",
            f"raise {flag}"
            + (f" (e.g. --kv-cache-memory-bytes={one_sequence_bytes})" if explicit_bytes else "")
            + f" or lower --max-model-len; the budget suggests: {shortfall.hint}",
        ) from shortfall
    return KvCacheBudget(budget, reason)
