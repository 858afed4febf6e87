"""Step: the KV connector of prefill/decode disaggregation, and context parallelism with it."""

from __future__ import annotations

from ascend_core.deployment import Deployment, KvTransferRole
from ascend_core.errors import ConfigError
from ascend_core.kv_transfer import MOONCAKE_V1, MOONCAKE_V1_MODULE, instance_problems
from ascend_core.plan import fields
from ascend_core.plan.result import Draft


def check_kv_transfer(deployment: Deployment, draft: Draft) -> Draft:
    """The connector, its transport and its options (ascend_core.kv_transfer); DCP-sharded
    transfer needs MLA; DCP on a producer and PCP on a consumer do nothing."""
    role = deployment.kv_transfer_role
    p = deployment.parallel
    if role is None:
        return draft
    problems = instance_problems(deployment)
    for what, fix, is_error in problems:
        draft = draft.fail(ConfigError(what, fix)) if is_error else draft.warn(f"{what} {fix}")
    kv = deployment.kv_transfer
    if kv is not None and kv.connector == MOONCAKE_V1 and not kv.module_path:
        draft = draft.change(
            fields.KV_CONNECTOR_MODULE,
            None,
            MOONCAKE_V1_MODULE,
            f"{MOONCAKE_V1} (the reference's name) is this plugin's connector over vLLM's "
            "MooncakeConnector; vLLM's connector factory finds it there in every process",
        )
    if p.dcp > 1 and not deployment.model.use_mla:
        # A DCP-sharded cache is split by token on top of the TP head split; only MLA's one
        # latent head (the same on every TP rank) lets both sides agree block by block.
        # vLLM applies the same rule to its own connector.
        draft = draft.fail(
            ConfigError(
                f"decode_context_parallel_size={p.dcp} with kv_transfer_config "
                f"(kv_role={role.value}) on {deployment.model.architecture}, which does "
                "not use MLA: a DCP-sharded KV cache can only be transferred for MLA models.",
                "Set decode_context_parallel_size=1 on this instance.",
            )
        )
    if role is KvTransferRole.PRODUCER and p.dcp > 1:
        draft = draft.warn(
            f"decode_context_parallel_size={p.dcp} on a KV producer: DCP only speeds up "
            "decoding, which a prefill instance hands off; the consumer must shard alike."
        )
    if role is KvTransferRole.CONSUMER and p.pcp > 1:
        draft = draft.warn(
            f"prefill_context_parallel_size={p.pcp} on a KV consumer: PCP splits prefill, "
            "which a decode instance receives from its producer."
        )
    return draft
