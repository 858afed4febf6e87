"""Step: check the parallel sizes against each other before anything is built on them."""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.errors import ConfigError
from ascend_core.plan import fields
from ascend_core.plan.result import Draft


def validate_parallel(deployment: Deployment, draft: Draft) -> Draft:
    """Context-parallel shapes, sequence parallel without TP, expert parallel without MoE."""
    p = deployment.parallel
    if p.pcp == 1:
        # Without PCP, DCP groups are carved out of the TP group: they must tile it.
        if p.tp % p.dcp:
            draft = draft.fail(
                ConfigError(
                    f"decode_context_parallel_size={p.dcp} does not divide "
                    f"tensor_parallel_size={p.tp}: DCP shards the KV cache across the TP "
                    "ranks, so its groups must tile the TP group.",
                    f"Choose decode_context_parallel_size among {_divisors(p.tp)}.",
                )
            )
    elif p.dcp not in (1, p.pcp, p.tp * p.pcp):
        # With PCP, a DCP group is either absent, the PCP axis, or the whole TP x PCP grid;
        # any other size would cut across both axes with no consistent KV ownership.
        draft = draft.fail(
            ConfigError(
                f"decode_context_parallel_size={p.dcp} with prefill_context_parallel_size="
                f"{p.pcp} and tensor_parallel_size={p.tp}: with PCP on, DCP must be off, "
                "span the PCP axis, or span the full TP x PCP grid.",
                f"Set decode_context_parallel_size to one of {sorted({1, p.pcp, p.tp * p.pcp})}.",
            )
        )
    if p.sequence_parallel and p.tp == 1:
        # Sequence parallelism splits the residual stream across TP ranks; with one rank
        # there is nothing to split, and the reduce-scatter/all-gather pair is pure cost.
        draft = draft.change(
            fields.SEQUENCE_PARALLEL,
            "1",
            "0",
            "sequence parallelism splits activations across tensor-parallel ranks and "
            "tensor_parallel_size is 1",
        ).decide(sequence_parallel=False)
    if p.expert_parallel and not deployment.model.is_moe:
        draft = draft.warn(
            f"enable_expert_parallel has no effect: {deployment.model.architecture} has no experts."
        )
    return draft


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
