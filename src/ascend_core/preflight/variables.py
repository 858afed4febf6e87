"""Preflight items for the VLLM_ASCEND_* variables: each valid, none unknown."""

from __future__ import annotations

from ascend_core.env_registry import ENV_VARS, read_env, unknown_variables
from ascend_core.errors import AscendError, PlanErrors
from ascend_core.preflight.items import CheckItem, CheckStatus
from ports.environment import Environment


def registry_items(env: Environment) -> list[CheckItem]:
    items: list[CheckItem] = []
    for var in ENV_VARS:
        raw = env.get(var.name)
        if raw is None:
            continue
        try:
            read_env(env, (var,))
        except AscendError as error:
            errors = error.errors if isinstance(error, PlanErrors) else (error,)
            items += [CheckItem(var.name, CheckStatus.FAIL, e.what, e.hint) for e in errors]
            continue
        ignored = var.no_effect_message()
        if ignored is not None:
            items.append(CheckItem(var.name, CheckStatus.WARN, ignored, f"unset {var.name}"))
            continue
        items.append(CheckItem(var.name, CheckStatus.PASS, f"{var.name}={raw}: {var.doc}"))
    for unknown in unknown_variables(env):
        items.append(CheckItem(unknown.name, CheckStatus.WARN, unknown.what, unknown.hint))
    if not items:
        items.append(
            CheckItem("VLLM_ASCEND_*", CheckStatus.PASS, "none set: every default applies")
        )
    return items
