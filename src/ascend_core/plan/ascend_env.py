"""Step: read the VLLM_ASCEND_* variables of the deployment; warn for those with no effect."""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.env.mapping import MappingEnvironment
from ascend_core.env_registry import ENV_VARS, EnvSettings, read_env
from ascend_core.errors import AscendError, PlanErrors
from ascend_core.plan.result import Draft


def check_ascend_env(deployment: Deployment, draft: Draft) -> Draft:
    """Typed values of the variables (bad ones are errors of this pass), and one warning for
    each variable that is set although this build does not act on it or vllm-ascend
    deprecates it."""
    try:
        settings = read_env(MappingEnvironment(deployment.ascend_env))
    except PlanErrors as problems:
        for error in problems.errors:
            draft = draft.fail(error)
        return draft
    except AscendError as error:
        return draft.fail(error)
    draft = draft.decide(env=settings)
    for message in env_notices(settings):
        draft = draft.warn(message)
    return draft


def env_notices(settings: EnvSettings) -> list[str]:
    """One line per set variable this build does not act on, or that vllm-ascend deprecates."""
    return [
        message
        for var in ENV_VARS
        if settings.is_set(var) and (message := var.notice()) is not None
    ]
