"""Step: parse and check vLLM's additional_config (the Ascend keys) against the deployment."""

from __future__ import annotations

from ascend_core.ascend_config import ParallelSizes
from ascend_core.ascend_config.env_fallback import fallback_values, precedence_warnings
from ascend_core.ascend_config.parse import check_ascend_config
from ascend_core.deployment import Deployment
from ascend_core.plan.ascend_rules import deployment_rule_errors, reference_key_warnings
from ascend_core.plan.result import Draft
from ports.device import DeviceKind


def validate_additional_config(deployment: Deployment, draft: Draft) -> Draft:
    """Every problem of additional_config (keys, values, rules between keys, rules against
    the deployment) as errors; vllm-ascend keys without effect here as warnings."""
    sizes = ParallelSizes(
        data_parallel_size=deployment.parallel.dp,
        tensor_parallel_size=deployment.parallel.tp,
    )
    env = draft.decisions.env
    config, problems = check_ascend_config(
        deployment.additional_config, sizes, fallback_values(env)
    )
    # The deployment rules run over the values that parsed, so they come in the same pass
    # as the key errors; only a clean config becomes the decision.
    if config is not None:
        problems.extend(deployment_rule_errors(deployment, config))
    for error in problems:
        draft = draft.fail(error)
    if config is None:
        return draft
    # The warnings come with the errors, in the same pass; only a clean config is decided.
    if config.given("enable_flashcomm1"):
        # vllm_ascend/ascend_config.py init_ascend_config warns whenever the key is written.
        draft = draft.warn(
            "additional_config.enable_flashcomm1 is deprecated by vllm-ascend (use vLLM's own "
            "sequence parallelism); this build still reads it."
        )
    for message in (*precedence_warnings(config, env), *reference_key_warnings(config)):
        draft = draft.warn(message)
    if deployment.device_kind is DeviceKind.CPU and config.enable_kv_nz:
        draft = draft.warn(
            "additional_config.enable_kv_nz is ignored on the host device: the NZ layout "
            "is the NPU cube unit's fractal format."
        )
    return draft if problems else draft.decide(ascend_config=config)
