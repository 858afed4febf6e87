"""The error raised when the KV cache cannot hold one sequence of max_model_len."""

from __future__ import annotations

from ascend_core.errors import ConfigError
from ascend_core.memory_budget.budget import MemoryBudget, plan_budget
from ascend_core.memory_budget.demand import MemoryDemand, Scaling


class KvCacheTooSmallError(ConfigError):
    """The KV cache cannot hold one sequence of max_model_len on a device."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget
        super().__init__(budget.what(), budget.hint())


def kv_cache_shortfall(
    demand: MemoryDemand, scaling: Scaling | None = None
) -> KvCacheTooSmallError | None:
    """The error to raise at `vllm serve` when one sequence does not fit, else None.

    The worker passes what it measured (Accounting.MEASURED) and the flag that set the
    budget, so the message names both.
    """
    budget = plan_budget(demand, scaling)
    return None if budget.fits else KvCacheTooSmallError(budget)
