"""Step: check the parallel sizes against each other before anything is built on them."""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.errors import ConfigError
from ascend_core.plan import fields
from ascend_core.plan.result import Draft
from ports.device import ChipFamily, DeviceKind


def validate_parallel(deployment: Deployment, draft: Draft) -> Draft:
    """Context-parallel shapes, sequence parallel without TP or (on MoE) without expert
    parallel, expert parallel without MoE."""
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
    model = deployment.model
    if p.dcp > 1 and model.use_sparse and not model.compressed_attention:
        draft = _sparse_mla_dcp(deployment, draft)
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
        if deployment.additional_config.get("enable_flashcomm1") is True:
            # Written there it wins over the variable, so it is turned off there too.
            draft = draft.change(
                fields.SEQUENCE_PARALLEL_KEY,
                True,
                False,
                "sequence parallelism needs tensor_parallel_size > 1",
            )
    elif p.sequence_parallel and deployment.model.is_moe and not p.expert_parallel:
        # vllm_ascend/platform.py _validate_sfa_dcp_kv_sp: the MoE layers of a
        # sequence-parallel model take their tokens already split over the TP ranks,
        # which only the expert-parallel dispatch accepts.
        draft = draft.fail(
            ConfigError(
                f"Sequence parallelism on {deployment.model.architecture}, a MoE model, needs "
                "enable_expert_parallel: its experts receive tokens split across the "
                "tensor-parallel ranks.",
                "Add --enable-expert-parallel, or turn sequence parallelism off.",
            )
        )
    if p.expert_parallel and not deployment.model.is_moe:
        draft = draft.warn(
            f"enable_expert_parallel has no effect: {deployment.model.architecture} has no experts."
        )
    return draft


def _sparse_mla_dcp(deployment: Deployment, draft: Draft) -> Draft:
    """vllm_ascend/platform.py _validate_parallel_config: DCP on sparse MLA (an indexer, no
    compression) replicates the indexer, so DCP must span all of TP, and only the profiles
    with SFA_DCP_REPLICATED_INDEXER (A2, A3) have the kernels."""
    p = deployment.parallel
    if p.dcp != p.tp:
        draft = draft.fail(
            ConfigError(
                f"decode_context_parallel_size={p.dcp} on {deployment.model.architecture} "
                f"(sparse MLA) must equal tensor_parallel_size={p.tp}: its indexer is "
                "replicated across the DCP group.",
                f"Set decode_context_parallel_size to {p.tp}, or to 1.",
            )
        )
    chip = deployment.chip_family
    if deployment.device_kind is DeviceKind.NPU and chip not in (ChipFamily.A2, ChipFamily.A3):
        draft = draft.fail(
            ConfigError(
                f"decode_context_parallel_size={p.dcp} on {deployment.model.architecture} "
                f"(sparse MLA) is not supported on {chip.value}: the replicated-indexer "
                "kernels exist for Atlas A2/A3.",
                "Set decode_context_parallel_size to 1 on this chip.",
            )
        )
    return draft


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
