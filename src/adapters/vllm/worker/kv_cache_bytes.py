"""How many bytes the KV cache gets, from the device runtime's memory figures and the flags.

The verdict and its message are the core's memory budget, the same the doctor prints.
"""

from __future__ import annotations

import math

from attrs import frozen

from ascend_core.errors import ConfigError
from ascend_core.memory_budget import (
    Accounting,
    BudgetFlag,
    KvCacheTooSmallError,
    MemoryDemand,
    SequenceCap,
    exact_bytes,
    flags_leave_default,
    format_bytes,
    host_flag_warning,
    host_kv_default,
    plan_budget,
)
from ports.runtime import MemoryInfo


@frozen
class KvCacheBudget:
    kv_cache_bytes: int
    reason: str
    warning: str | None = None  # the host's RAM mostly taken by a flag


def kv_cache_budget(
    memory: MemoryInfo,
    utilization: float,
    explicit_bytes: int | None,
    one_sequence_bytes: int,
    max_model_len: int,
    block_size: int = 1,
    host_workers: int | None = None,
    max_num_seqs: int | None = None,
) -> KvCacheBudget:
    """--kv-cache-memory-bytes when given, else utilization x total minus what this process holds.

    host_workers: on the host device, the local workers sharing its RAM. There, with
    neither flag given, the core's host default sizes the cache instead (a capped share
    of the memory available after the weights), and a flag that takes most of the RAM
    comes with a warning. max_num_seqs (the scheduler's) caps that default at what so many
    sequences of max_model_len can fill.

    Raises the core's KvCacheTooSmallError (a ConfigError with the numbers and the flag to
    change) when the result cannot hold one sequence of max_model_len tokens, and a
    ConfigError when --kv-cache-memory-bytes exceeds free memory.
    """
    blocks = math.ceil(max_model_len / block_size)
    per_token = max(1, one_sequence_bytes // (blocks * block_size))
    warning = None
    if host_workers is not None:
        if flags_leave_default(utilization, explicit_bytes):
            sequences = (
                SequenceCap(
                    max_num_seqs, max_model_len, max(1, one_sequence_bytes), per_token * block_size
                )
                if max_num_seqs
                else None
            )
            default = host_kv_default(memory, host_workers, sequences)
            demand = MemoryDemand.from_host_default(default, per_token, max_model_len, block_size)
            return _checked(demand)
        flag = BudgetFlag.KV_CACHE_MEMORY_BYTES if explicit_bytes else BudgetFlag.MEMORY_UTILIZATION
        share = explicit_bytes or int(memory.total_bytes * utilization)
        warning = host_flag_warning(flag.value, share, memory.total_bytes)
    if explicit_bytes:
        if explicit_bytes > memory.free_bytes:
            raise ConfigError(
                f"--kv-cache-memory-bytes={explicit_bytes} ({format_bytes(explicit_bytes)}) "
                f"exceeds the {exact_bytes(memory.free_bytes)} free of "
                f"{format_bytes(memory.total_bytes)} on the device.",
                f"lower --kv-cache-memory-bytes below {memory.free_bytes}",
            )
        demand = MemoryDemand.explicit(int(explicit_bytes), per_token, max_model_len, block_size)
    else:
        allowed = int(memory.total_bytes * utilization)
        held = memory.peak_allocated_bytes
        demand = MemoryDemand(
            device_memory_bytes=memory.total_bytes,
            memory_utilization=utilization,
            weights_bytes=held,
            # Free memory caps the share: what the device lacks of it is taken off too.
            reserve_bytes=max(0, allowed - held - memory.free_bytes),
            kv_bytes_per_token=per_token,
            max_model_len=max_model_len,
            block_size=block_size,
            accounting=Accounting.MEASURED,
        )
    return _checked(demand, warning)


def _checked(demand: MemoryDemand, warning: str | None = None) -> KvCacheBudget:
    budget = plan_budget(demand)
    if not budget.fits:
        raise KvCacheTooSmallError(budget)
    return KvCacheBudget(demand.kv_bytes_available, budget.what(), warning)
