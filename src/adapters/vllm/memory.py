"""How many bytes the KV cache gets, from the device runtime's memory figures and the flags."""

from __future__ import annotations

from attrs import frozen

from ascend_core.errors import ConfigError
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
    else:
        allowed = int(memory.total_bytes * utilization)
        used = memory.peak_allocated_bytes
        budget = min(allowed - used, memory.free_bytes)
        flag = "--gpu-memory-utilization"
        reason = (
            f"KV cache: {_gib(max(budget, 0))} = {utilization} x {_gib(memory.total_bytes)} "
            f"(--gpu-memory-utilization of device memory) - {_gib(used)} already in use"
        )
    if budget < one_sequence_bytes:
        raise ConfigError(
            f"The KV cache gets {max(budget, 0)} bytes ({_gib(max(budget, 0))}) but one "
            f"sequence of max_model_len={max_model_len} tokens needs {one_sequence_bytes} bytes "
            f"({_gib(one_sequence_bytes)}).",
            f"raise {flag} (e.g. --kv-cache-memory-bytes={one_sequence_bytes}) "
            f"or lower --max-model-len",
        )
    return KvCacheBudget(budget, reason)
