"""How many experts each expert-parallel rank holds, redundant replicas included."""

from __future__ import annotations

from attrs import field, frozen, validators


@frozen
class ExpertPlacement:
    """The routed experts over `ep_size` ranks: `logical` experts plus `redundant` replicas
    (EPLB's num_redundant_experts), placed as vLLM does: the physical experts split into
    contiguous runs, the first `physical % ep_size` ranks one more."""

    logical: int = field(validator=validators.ge(1))
    redundant: int = field(validator=validators.ge(0))
    ep_size: int = field(validator=validators.ge(1))

    @property
    def physical(self) -> int:
        return self.logical + self.redundant

    @property
    def most_per_rank(self) -> int:
        return -(-self.physical // self.ep_size)

    @property
    def fewest_per_rank(self) -> int:
        return self.physical // self.ep_size

    @property
    def even(self) -> bool:
        return self.physical % self.ep_size == 0

    def describe(self) -> str:
        spare = f" ({self.logical} + {self.redundant} redundant)" if self.redundant else ""
        if self.even:
            share = f"{self.most_per_rank} a rank"
        else:
            share = f"{self.fewest_per_rank} to {self.most_per_rank} a rank"
        return f"{self.physical} experts{spare} over {self.ep_size} EP ranks: {share}"


def place_experts(logical: int, redundant: int, ep_size: int) -> tuple[ExpertPlacement, str | None]:
    """The placement, and why it cannot serve (None when it can): redundant replicas need
    expert parallelism and, as vLLM's EPLB requires, the same count on every rank."""
    placement = ExpertPlacement(logical, redundant, ep_size)
    if redundant and ep_size == 1:
        return placement, (f"{redundant} redundant experts need expert parallelism (EP size is 1)")
    if redundant and not placement.even:
        return placement, (
            f"{placement.physical} physical experts ({logical} + {redundant} redundant) do "
            f"not split evenly over {ep_size} EP ranks, as EPLB needs"
        )
    return placement, None
