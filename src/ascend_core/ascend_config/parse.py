"""parse_ascend_config: raw `additional_config` to AscendConfig, every problem reported at once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import attrs

from ascend_core.ascend_config.env_fallback import apply_fallbacks
from ascend_core.ascend_config.fields import FieldSpec, SectionSpec, specs_of
from ascend_core.ascend_config.parallel import ParallelSizes, validate_against_parallel
from ascend_core.ascend_config.reference_keys import (
    REFERENCE_KEYS,
    ReferenceSection,
    reference_keys_under,
)
from ascend_core.ascend_config.retired import RETIRED_KEYS
from ascend_core.ascend_config.rules import cross_field_errors
from ascend_core.ascend_config.schema import AscendConfig
from ascend_core.errors import AscendError, ConfigError, PlanErrors
from ascend_core.suggest import did_you_mean

ROOT = "additional_config"
S = TypeVar("S")


def parse_ascend_config(
    raw: Mapping[str, Any] | None,
    parallel: ParallelSizes | None = None,
    fallbacks: Mapping[str, object] | None = None,
) -> AscendConfig:
    """Validate `raw` (vLLM's additional_config; None means empty) into an AscendConfig.

    With `parallel`, the checks that depend on the parallel layout run too.
    `fallbacks` (dotted path -> value, from env_fallback.fallback_values) replace the
    defaults of keys `raw` leaves out, before the rules between keys run.
    One problem raises its ConfigError; several raise PlanErrors with all of them.
    """
    config, problems = check_ascend_config(raw, parallel, fallbacks)
    if len(problems) == 1:
        raise problems[0]
    if problems or config is None:
        raise PlanErrors(problems)
    return config


def check_ascend_config(
    raw: Mapping[str, Any] | None,
    parallel: ParallelSizes | None = None,
    fallbacks: Mapping[str, object] | None = None,
) -> tuple[AscendConfig | None, list[AscendError]]:
    """What parse_ascend_config reads, without raising: the config over the values that
    parsed (None when `raw` is not a mapping) and every problem found.

    The plan uses it to run its rules against the deployment in the same pass.
    """
    problems: list[AscendError] = []
    seen = _Seen()
    config = _section(AscendConfig, raw, ROOT, problems, seen)
    if config is not None:
        config = attrs.evolve(config, explicit=frozenset(seen.explicit), reference=seen.reference)
        if fallbacks:
            config = apply_fallbacks(config, fallbacks)
    # The rules run over the values that parsed (a bad value counts as its
    # default), so a key error and a rule error come out in the same pass.
    if config is not None:
        problems.extend(cross_field_errors(config))
        if parallel is not None:
            problems.extend(validate_against_parallel(config, parallel))
    return config, problems


@attrs.define
class _Seen:
    """What a parse saw besides the values: keys written, reference-only keys' values."""

    explicit: set[str] = attrs.Factory(set)
    reference: dict[str, object] = attrs.Factory(dict)


def _relative(path: str) -> str:
    return path.removeprefix(ROOT).removeprefix(".")


def _keys_of(raw: object, path: str, problems: list[AscendError]) -> Mapping[str, Any] | None:
    """`raw` as a mapping of text keys; None (with the problem noted) when it is not one."""
    if not isinstance(raw, Mapping):
        problems.append(
            ConfigError(
                f"{path} must be a mapping (JSON object), got {type(raw).__name__}.",
                'write it as {"key": value, ...}, or leave it out for the defaults',
            )
        )
        return None
    keys: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(key, str):
            keys[key] = value
        else:
            problems.append(
                ConfigError(f"{path} has a key {key!r} that is not text.", "keys are strings")
            )
    return keys


def _section(
    schema: type[S], raw: object, path: str, problems: list[AscendError], seen: _Seen
) -> S | None:
    """An instance of `schema` from `raw`, appending to `problems` what is wrong in it."""
    if raw is None:
        return schema()
    keys = _keys_of(raw, path, problems)
    if keys is None:
        return None
    specs = specs_of(schema)
    values: dict[str, object] = {}
    for key, value in keys.items():
        key_path = f"{path}.{key}"
        spec = specs.get(key)
        if spec is None:
            _reference_or_unknown(key, value, key_path, list(specs), problems, seen)
            continue
        seen.explicit.add(_relative(key_path))
        if isinstance(spec, SectionSpec):
            section = _section(spec.schema, value, key_path, problems, seen)
            if section is not None:
                values[key] = section
        else:
            try:
                values[key] = spec.read(value, key_path)
            except ConfigError as error:
                problems.append(error)
    # attrs classes take their fields as keywords; mypy cannot see that through a TypeVar.
    return cast(Callable[..., S], schema)(**values)


def _reference_or_unknown(
    key: str,
    value: object,
    key_path: str,
    known: list[str],
    problems: list[AscendError],
    seen: _Seen,
) -> None:
    """A key this schema lacks: a reference-plugin key (validated, kept) or an error."""
    relative = _relative(key_path)
    reference = REFERENCE_KEYS.get(relative)
    if reference is None:
        section = relative.rpartition(".")[0]
        problems.append(_unknown_key(key, key_path, known + list(reference_keys_under(section))))
        return
    seen.explicit.add(relative)
    checked = _reference_value(reference.spec, value, key_path, problems)
    if checked is not _INVALID:
        seen.reference[relative] = checked


_INVALID = object()


def _reference_value(
    spec: FieldSpec | ReferenceSection, value: object, path: str, problems: list[AscendError]
) -> object:
    """`value` checked against a reference key's spec; _INVALID when it has problems."""
    if isinstance(spec, FieldSpec):
        try:
            return spec.read(value, path)
        except ConfigError as error:
            problems.append(error)
            return _INVALID
    if value is None:
        return {}
    keys = _keys_of(value, path, problems)
    if keys is None:
        return _INVALID
    before = len(problems)
    checked: dict[str, object] = {}
    for key, item in keys.items():
        inner = spec.keys.get(key)
        if inner is None:
            problems.append(_unknown_key(key, f"{path}.{key}", list(spec.keys)))
            continue
        checked[key] = _reference_value(inner, item, f"{path}.{key}", problems)
    return checked if len(problems) == before else _INVALID


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
