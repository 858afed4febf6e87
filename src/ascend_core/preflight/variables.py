"""Preflight items for the VLLM_ASCEND_* variables (each valid, none unknown) and for the
outside variables the plan reads (OUTSIDE_VARS: each, when set, valid for its owner)."""

from __future__ import annotations

from ascend_core.env_registry import ENV_VARS, OUTSIDE_VARS, read_env, unknown_variables
from ascend_core.errors import AscendError, PlanErrors
from ascend_core.preflight.items import CheckItem, CheckStatus
from ports.environment import Environment


def registry_items(env: Environment) -> list[CheckItem]:
    items: list[CheckItem] = []
    for var in (*ENV_VARS, *OUTSIDE_VARS):
        raw = env.get(var.name)
        if raw is None:
            continue
        try:
            read_env(env, (var,))
        except AscendError as error:
            errors = error.errors if isinstance(error, PlanErrors) else (error,)
            if var.owner is not None:  # its owner reads it; the plan takes it as unset
                items += [
                    CheckItem(
                        var.name,
                        CheckStatus.WARN,
                        f"{e.what} ({var.owner}'s variable; the plan takes it as unset)",
                        e.hint,
                    )
                    for e in errors
                ]
                continue
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
