"""The host device's KV-cache default, and the warning when a flag takes most of the RAM.

vLLM sizes a device's KV cache as --gpu-memory-utilization (0.92 by default) of its
memory; on the host that is 0.92 of the machine's RAM, which leaves nothing for the
rest of the machine. With neither flag given, the host device instead takes a share of
the memory still available once the weights are loaded, capped at what vLLM's own CPU
build gave by default for years (VLLM_CPU_KVCACHE_SPACE=4, GiB), split between the
local workers.
"""

from __future__ import annotations

import math

from attrs import field, frozen, validators

from ascend_core.memory_budget.units import GIB, exact_bytes, format_bytes
from ports.runtime import MemoryInfo

# vLLM's default --gpu-memory-utilization (CacheConfig.gpu_memory_utilization; the
# upstream-surface test checks it): vLLM's config cannot tell it from the same value
# given on purpose, so this value counts as "not given".
VLLM_DEFAULT_UTILIZATION = 0.92
# The most the default gives the KV cache (all local workers together).
HOST_KV_CAP_BYTES = 4 * GIB
# The default's share of the memory available after the weights: the other half stays
# for the OS, the page cache and other processes.
HOST_KV_SHARE = 0.5
# A flag that gives the KV cache more than this share of the host's RAM gets a warning.
MOST_OF_HOST_RAM = 0.5


def _not_negative(value: int) -> int:
    return max(0, int(value))


@frozen
class SequenceCap:
    """The most KV cache one worker can ever fill: max_num_seqs sequences of max_model_len
    tokens at once, in whole blocks, plus the one block vLLM's block pool keeps aside
    (its null block)."""

    max_num_seqs: int = field(validator=validators.ge(1))
    max_model_len: int = field(validator=validators.ge(1))
    sequence_bytes: int = field(validator=validators.ge(1))  # one sequence, whole blocks
    block_bytes: int = field(default=0, validator=validators.ge(0))

    @property
    def bytes(self) -> int:
        return self.max_num_seqs * self.sequence_bytes + self.block_bytes

    def describe(self) -> str:
        return (
            f"{exact_bytes(self.bytes)} that max_num_seqs={self.max_num_seqs} sequences of "
            f"max_model_len={self.max_model_len} can use"
        )


@frozen
class HostKvDefault:
    """The host default's inputs (memory numbers from the runtime port) and its result."""

    available_bytes: int = field(converter=_not_negative)  # after the weights
    total_bytes: int = field(validator=validators.ge(1))
    workers: int = field(default=1, validator=validators.ge(1))  # local workers sharing it
    share: float = HOST_KV_SHARE
    cap_bytes: int = HOST_KV_CAP_BYTES
    # What each worker can fill; None when unknown (then only the share and the cap).
    sequences: SequenceCap | None = None

    @property
    def memory_share_bytes(self) -> int:
        """Each worker's part of min(cap, share x available), before the sequence cap."""
        return min(self.cap_bytes, int(self.available_bytes * self.share)) // self.workers

    @property
    def capped_by_sequences(self) -> bool:
        return self.sequences is not None and self.sequences.bytes < self.memory_share_bytes

    @property
    def kv_cache_bytes(self) -> int:
        """Each worker's KV cache."""
        if self.sequences is not None and self.capped_by_sequences:
            return self.sequences.bytes
        return self.memory_share_bytes

    def arithmetic(self) -> str:
        split = f" / {self.workers} local workers" if self.workers > 1 else ""
        text = (
            f"the host default, min({format_bytes(self.cap_bytes)} cap, {self.share:.2f} x "
            f"{format_bytes(self.available_bytes)} available after the weights of "
            f"{format_bytes(self.total_bytes)} RAM){split}"
        )
        if self.sequences is not None and self.capped_by_sequences:
            return (
                f"{text} = {format_bytes(self.memory_share_bytes)}, capped at the "
                f"{self.sequences.describe()} (--max-num-seqs or --kv-cache-memory-bytes "
                "for more)"
            )
        return f"{text}, gives {exact_bytes(self.kv_cache_bytes)}"


def host_kv_default(
    memory: MemoryInfo, workers: int = 1, sequences: SequenceCap | None = None
) -> HostKvDefault:
    """The default for memory read once the weights are loaded (free = what the OS has
    available; the weights already count as used)."""
    return HostKvDefault(
        memory.free_bytes, memory.total_bytes, max(1, workers), sequences=sequences
    )


def flags_leave_default(utilization: float, explicit_bytes: int | None) -> bool:
    """Whether neither --kv-cache-memory-bytes nor a non-default utilization was given."""
    return not explicit_bytes and math.isclose(utilization, VLLM_DEFAULT_UTILIZATION)


def host_flag_warning(flag: str, kv_share_bytes: int, total_bytes: int) -> str | None:
    """A warning when `flag` lets vLLM take more than MOST_OF_HOST_RAM of the host's RAM.

    kv_share_bytes: what the flag hands to vLLM (--kv-cache-memory-bytes, or utilization
    x total for --gpu-memory-utilization), before the weights are taken off.
    """
    if total_bytes <= 0 or kv_share_bytes <= MOST_OF_HOST_RAM * total_bytes:
        return None
    return (
        f"{flag} gives vLLM {format_bytes(kv_share_bytes)}, "
        f"{kv_share_bytes / total_bytes:.0%} of the host's {format_bytes(total_bytes)} RAM "
        "(the host device's memory is this machine's): other processes may be swapped "
        "out or killed. Fix: leave out --gpu-memory-utilization and "
        "--kv-cache-memory-bytes for the host default (at most "
        f"{format_bytes(HOST_KV_CAP_BYTES)}, half the memory available after the weights, no "
        "more than max_num_seqs sequences can fill), "
        "or lower the flag"
    )
