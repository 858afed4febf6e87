"""What fits on one device, its verdict in words, and the fixes when one sequence does not."""

from __future__ import annotations

from attrs import frozen

from ascend_core.memory_budget.demand import PART_NAMES, MemoryDemand, Scaling
from ascend_core.memory_budget.fixes import MemoryFix, find_fixes
from ascend_core.memory_budget.units import exact_bytes, format_bytes


@frozen
class MemoryBudget:
    """What fits on one device and, when one sequence does not, the changes that fix it."""

    demand: MemoryDemand
    fixes: tuple[MemoryFix, ...]

    @property
    def fits(self) -> bool:
        return self.demand.fits

    @property
    def tokens(self) -> int:
        return self.demand.tokens

    @property
    def sequences(self) -> int:
        """Whole sequences of max_model_len the KV cache holds at once."""
        return self.demand.tokens // self.demand.max_model_len

    def what(self) -> str:
        """The verdict with its arithmetic; for a failure, why it fails."""
        d = self.demand
        if d.kv_bytes_available <= 0:
            subject = PART_NAMES[d.accounting][2]
            return f"{subject} no memory for the KV cache: {d.arithmetic()}."
        if not d.fits:
            return (
                f"KV cache cannot hold one sequence of max_model_len={d.max_model_len}: it "
                f"needs {exact_bytes(d.sequence_bytes)} at "
                f"{format_bytes(d.kv_bytes_per_token)} per token, but "
                f"{d.arithmetic()}, which holds {d.tokens} tokens."
            )
        return (
            f"KV cache holds {d.tokens} tokens = {self.sequences} sequence(s) of "
            f"max_model_len={d.max_model_len} ({format_bytes(d.kv_bytes_per_token)} per "
            f"token; {d.arithmetic()})."
        )

    def hint(self) -> str:
        """The smallest fix first, then the others; empty when it fits."""
        if self.fits:
            return ""
        if not self.fixes:
            return (
                f"no single change fits: free device memory or raise "
                f"{self.demand.budget_flag.value}, and combine a shorter --max-model-len "
                "with a larger --tensor-parallel-size or a quantized checkpoint"
            )
        first, *rest = self.fixes
        text = f"{first.argument} ({first.detail})"
        if rest:
            text += "; or " + "; or ".join(f"{f.argument} ({f.detail})" for f in rest)
        return text


def plan_budget(demand: MemoryDemand, scaling: Scaling | None = None) -> MemoryBudget:
    """The budget and, when one sequence does not fit, every single change that fixes it.

    Without `scaling` only the two flags that need no model facts are searched.
    """
    if demand.fits:
        return MemoryBudget(demand, ())
    return MemoryBudget(demand, find_fixes(demand, scaling))
