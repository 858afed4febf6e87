"""Where a VLLM_ASCEND_* variable and an additional_config key set the same thing.

The one rule: a key the user wrote in additional_config wins; the variable only replaces
the key's default when the key is absent. When both are set and disagree the plan warns,
naming both. (vllm_ascend/ascend_config.py does the same: its "envs fallback" fields take
the envs.py value as their default, and an explicit key overrides it.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ascend_core.ascend_config.reference_keys import REFERENCE_KEYS
from ascend_core.ascend_config.schema import AscendConfig
from ascend_core.env.reference_vars import ENABLE_FUSED_MC2, FUSION_OP_TRANSPOSE_KV_CACHE_BY_BLOCK
from ascend_core.env.variables import EnvVar
from ascend_core.env_registry import (
    BALANCE_SCHEDULING,
    ENABLE_FLASHCOMM1,
    ENABLE_MLAPO,
    ENABLE_NZ,
    EnvSettings,
)

# (variable, dotted additional_config path it is the fallback of)
ENV_FALLBACKS: tuple[tuple[EnvVar[Any], str], ...] = (
    (ENABLE_NZ, "weight_nz_mode"),
    (ENABLE_MLAPO, "enable_mlapo"),
    (ENABLE_FLASHCOMM1, "enable_flashcomm1"),
    (ENABLE_FUSED_MC2, "enable_fused_mc2"),
    (FUSION_OP_TRANSPOSE_KV_CACHE_BY_BLOCK, "enable_transpose_kv_cache_by_block"),
    (BALANCE_SCHEDULING, "scheduler_config.enable_balance_scheduling"),
)


def fallback_values(settings: EnvSettings | None) -> dict[str, object]:
    """Dotted path -> the value its variable gives, for each variable that is set."""
    if settings is None:
        return {}
    return {path: settings.get(var) for var, path in ENV_FALLBACKS if settings.is_set(var)}


def apply_fallbacks(config: AscendConfig, values: Mapping[str, object]) -> AscendConfig:
    """`config` with each absent key at `values`' path taking the variable's value."""
    fields: dict[str, Any] = {}
    reference = dict(config.reference)
    for path, value in values.items():
        if config.given(path):
            continue
        if path in REFERENCE_KEYS:
            reference[path] = value
        else:
            fields[path] = value
    return attrs.evolve(config, reference=reference, **fields)


def precedence_warnings(config: AscendConfig, settings: EnvSettings | None) -> list[str]:
    """A warning for each key written in additional_config that its set variable contradicts."""
    if settings is None:
        return []
    warnings = []
    for var, path in ENV_FALLBACKS:
        if not (settings.is_set(var) and config.given(path)):
            continue
        written = config.reference_value(path) if path in REFERENCE_KEYS else getattr(config, path)
        if written != settings.get(var):
            warnings.append(
                f"{var.name}={_text(settings.get(var))} and additional_config.{path}="
                f"{_text(written)} disagree; the additional_config key wins (the variable "
                "only replaces the key's default)."
            )
    return warnings


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
