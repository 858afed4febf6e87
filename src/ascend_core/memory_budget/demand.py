"""One device's memory demand, estimated or measured, and how its KV space is derived."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from types import MappingProxyType

import attrs
from attrs import field, frozen, validators

from ascend_core.deployment import ModelFacts
from ascend_core.memory_budget.host_default import HostKvDefault
from ascend_core.memory_budget.units import exact_bytes, format_bytes

# The largest tensor-parallel size searched for a fix (two A3 nodes of 16 devices each).
MAX_SUGGESTED_TP = 32


class BudgetFlag(enum.Enum):
    """The `vllm serve` flag that set a device's KV-cache budget, the one to change."""

    MEMORY_UTILIZATION = "--gpu-memory-utilization"
    KV_CACHE_MEMORY_BYTES = "--kv-cache-memory-bytes"


class Accounting(enum.Enum):
    """Where a demand's weights_bytes and reserve_bytes come from, which names them."""

    # The doctor: weights from safetensors headers, reserve from estimate_reserve.
    ESTIMATED = "estimated"
    # The worker: weights_bytes is the peak the process held when the KV cache is sized
    # (weights plus its working memory: the allocator's peak on an NPU, the resident set
    # on the host, so non-torch memory too), reserve_bytes the part of the utilization
    # share the device lacks free.
    MEASURED = "measured"


# Per accounting: the names of weights_bytes and reserve_bytes in the arithmetic, and
# the subject of "... no memory for the KV cache".
PART_NAMES: Mapping[Accounting, tuple[str, str, str]] = MappingProxyType(
    {
        Accounting.ESTIMATED: ("weights", "reserve", "Weights and reserve leave"),
        Accounting.MEASURED: (
            "held by this process at its peak (weights and working memory; on the host "
            "non-torch memory too)",
            "not free on the device",
            "What this process holds leaves",
        ),
    }
)


@frozen
class MemoryDemand:
    """The numbers of one device's budget, estimated (doctor) or measured (worker)."""

    device_memory_bytes: int = field(validator=validators.ge(1))
    memory_utilization: float = field(validator=[validators.gt(0.0), validators.le(1.0)])
    weights_bytes: int = field(validator=validators.ge(0))  # on this device
    reserve_bytes: int = field(validator=validators.ge(0))  # activations and runtime
    kv_bytes_per_token: int = field(validator=validators.ge(1))  # on this device
    max_model_len: int = field(validator=validators.ge(1))
    block_size: int = field(default=128, validator=validators.ge(1))
    budget_flag: BudgetFlag = BudgetFlag.MEMORY_UTILIZATION
    accounting: Accounting = Accounting.ESTIMATED
    # Set when the host default sized the KV cache (no flag given): its arithmetic is
    # shown, and --kv-cache-memory-bytes is the flag that changes it.
    host_default: HostKvDefault | None = None

    @classmethod
    def explicit(
        cls, kv_cache_bytes: int, kv_bytes_per_token: int, max_model_len: int, block_size: int
    ) -> MemoryDemand:
        """--kv-cache-memory-bytes: the flag is the whole KV budget, nothing is taken off it."""
        return cls(
            device_memory_bytes=kv_cache_bytes,
            memory_utilization=1.0,
            weights_bytes=0,
            reserve_bytes=0,
            kv_bytes_per_token=kv_bytes_per_token,
            max_model_len=max_model_len,
            block_size=block_size,
            budget_flag=BudgetFlag.KV_CACHE_MEMORY_BYTES,
            accounting=Accounting.MEASURED,
        )

    @classmethod
    def from_host_default(
        cls,
        default: HostKvDefault,
        kv_bytes_per_token: int,
        max_model_len: int,
        block_size: int,
        accounting: Accounting = Accounting.MEASURED,
    ) -> MemoryDemand:
        """The host default as the whole KV budget, as if --kv-cache-memory-bytes gave it."""
        return attrs.evolve(
            cls.explicit(
                max(1, default.kv_cache_bytes), kv_bytes_per_token, max_model_len, block_size
            ),
            accounting=accounting,
            host_default=default,
        )

    @property
    def usable_bytes(self) -> int:
        return int(self.device_memory_bytes * self.memory_utilization)

    @property
    def kv_bytes_available(self) -> int:
        """What is left for the KV cache; negative when weights and reserve alone overflow."""
        return self.usable_bytes - self.weights_bytes - self.reserve_bytes

    @property
    def num_blocks(self) -> int:
        return max(0, self.kv_bytes_available) // (self.block_size * self.kv_bytes_per_token)

    @property
    def tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def sequence_bytes(self) -> int:
        """KV bytes one sequence of max_model_len takes, in whole blocks."""
        blocks = math.ceil(self.max_model_len / self.block_size)
        return blocks * self.block_size * self.kv_bytes_per_token

    @property
    def fits(self) -> bool:
        return self.tokens >= self.max_model_len

    def arithmetic(self) -> str:
        """How the KV space is derived, with every number and the flag that set it."""
        available = exact_bytes(self.kv_bytes_available)
        if self.host_default is not None:
            return self.host_default.arithmetic()
        if self.budget_flag is BudgetFlag.KV_CACHE_MEMORY_BYTES:
            return f"{self.budget_flag.value}={self.device_memory_bytes} gives {available}"
        weights, reserve, _ = PART_NAMES[self.accounting]
        # A measured shortage of free memory is shown only when there is one.
        shown = self.reserve_bytes or self.accounting is Accounting.ESTIMATED
        return (
            f"{format_bytes(self.device_memory_bytes)} x {self.memory_utilization:.2f} "
            f"({self.budget_flag.value}) "
            f"- {format_bytes(self.weights_bytes)} {weights} "
            + (f"- {format_bytes(self.reserve_bytes)} {reserve} " if shown else "")
            + f"= {available} for the KV cache"
        )


@frozen
class Scaling:
    """What the fix search needs to re-derive the budget at another TP size or precision."""

    model: ModelFacts
    kv_dtype_bytes: int
    tp: int = 1
    pp: int = 1
    weights_quantized: bool = False
    max_tp: int = MAX_SUGGESTED_TP
