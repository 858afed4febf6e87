"""Step: parse and check vLLM's additional_config (the Ascend keys) against the deployment."""

from __future__ import annotations

from ascend_core.ascend_config import ParallelSizes, parse_ascend_config
from ascend_core.ascend_config.env_fallback import fallback_values, precedence_warnings
from ascend_core.deployment import Deployment
from ascend_core.errors import AscendError, PlanErrors
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
    try:
        config = parse_ascend_config(deployment.additional_config, sizes, fallback_values(env))
    except PlanErrors as problems:
        for error in problems.errors:
            draft = draft.fail(error)
        return draft
    except AscendError as error:
        return draft.fail(error)
    for rule_error in deployment_rule_errors(deployment, config):
        draft = draft.fail(rule_error)
    for message in (*precedence_warnings(config, env), *reference_key_warnings(config)):
        draft = draft.warn(message)
    draft = draft.decide(ascend_config=config)
    if deployment.device_kind is DeviceKind.CPU and config.enable_kv_nz:
        draft = draft.warn(
            "additional_config.enable_kv_nz is ignored on the host device: the NZ layout "
            "is the NPU cube unit's fractal format."
        )
    return draft
