"""The `attention` section: which backend the core picks for this model and target."""

from __future__ import annotations

from adapters.doctor.plan.items import PASS, failed
from adapters.doctor.plan.model import Target
from ascend_core.attention import attention_request, batch_invariant_requested, serving_backend
from ascend_core.deployment import ModelFacts
from ascend_core.env.mapping import MappingEnvironment
from ascend_core.env_registry import read_env
from ascend_core.errors import AscendError
from ascend_core.preflight import CheckItem
from ports.environment import Environment


def attention_items(model: ModelFacts, target: Target, env: Environment) -> list[CheckItem]:
    """The chosen attention backend and the core's reason, or why none serves (as serve)."""
    try:
        settings = read_env(env)
    except AscendError:
        settings = read_env(MappingEnvironment({}))  # `check` reports the bad value
    invariant = batch_invariant_requested(env, settings)
    try:
        request = attention_request(
            model, target.kind, target.chip_family, batch_invariant=invariant
        )
        choice = serving_backend(request)
    except AscendError as error:
        return failed("backend", error)
    return [CheckItem("backend", PASS, f"{choice.kind.value}: {choice.reason}")]
