"""parse_ascend_config: raw `additional_config` to AscendConfig, every problem reported at once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from ascend_core.ascend_config.fields import SectionSpec, specs_of
from ascend_core.ascend_config.parallel import ParallelSizes, validate_against_parallel
from ascend_core.ascend_config.retired import RETIRED_KEYS
from ascend_core.ascend_config.rules import cross_field_errors
from ascend_core.ascend_config.schema import AscendConfig
from ascend_core.errors import AscendError, ConfigError, PlanErrors
from ascend_core.suggest import did_you_mean

ROOT = "additional_config"
S = TypeVar("S")


def parse_ascend_config(
    raw: Mapping[str, Any] | None, parallel: ParallelSizes | None = None
) -> AscendConfig:
    """Validate `raw` (vLLM's additional_config; None means empty) into an AscendConfig.

    With `parallel`, the checks that depend on the parallel layout run too.
    One problem raises its ConfigError; several raise PlanErrors with all of them.
    """
    problems: list[AscendError] = []
    config = _section(AscendConfig, raw, ROOT, problems)
    # The rules run over the values that parsed (a bad value counts as its
    # default), so a key error and a rule error come out in the same pass.
    if config is not None:
        problems.extend(cross_field_errors(config))
        if parallel is not None:
            problems.extend(validate_against_parallel(config, parallel))
    if len(problems) == 1:
        raise problems[0]
    if problems or config is None:
        raise PlanErrors(problems)
    return config


def _section(schema: type[S], raw: object, path: str, problems: list[AscendError]) -> S | None:
    """An instance of `schema` from `raw`, appending to `problems` what is wrong in it."""
    if raw is None:
        return schema()
    if not isinstance(raw, Mapping):
        problems.append(
            ConfigError(
                f"{path} must be a mapping (JSON object), got {type(raw).__name__}.",
                'write it as {"key": value, ...}, or leave it out for the defaults',
            )
        )
        return None
    specs = specs_of(schema)
    values: dict[str, object] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            problems.append(
                ConfigError(f"{path} has a key {key!r} that is not text.", "keys are strings")
            )
            continue
        key_path = f"{path}.{key}"
        spec = specs.get(key)
        if spec is None:
            problems.append(_unknown_key(key, key_path, list(specs)))
        elif isinstance(spec, SectionSpec):
            section = _section(spec.schema, value, key_path, problems)
            if section is not None:
                values[key] = section
        else:
            try:
                values[key] = spec.read(value, key_path)
            except ConfigError as error:
                problems.append(error)
    # attrs classes take their fields as keywords; mypy cannot see that through a TypeVar.
    return cast(Callable[..., S], schema)(**values)


def _unknown_key(key: str, key_path: str, known: list[str]) -> ConfigError:
    retired = RETIRED_KEYS.get(key_path.removeprefix(ROOT + "."))
    if retired is not None and retired.replacement is None:
        return ConfigError(
            f"{key_path} was removed: {retired.reason}.", f"delete {key} from additional_config"
        )
    if retired is not None:
        return ConfigError(
            f"{key_path} was replaced by {ROOT}.{retired.replacement}: {retired.reason}.",
            f"move the setting to {ROOT}.{retired.replacement}",
        )
    suggestion = did_you_mean(key, known).strip()
    listing = ", ".join(known)
    return ConfigError(
        f"Unknown key {key_path}.",
        f"{suggestion} Keys accepted here: {listing}"
        if suggestion
        else f"use one of the keys accepted here: {listing}",
    )
