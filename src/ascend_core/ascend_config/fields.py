"""Typed `additional_config` fields: what each key accepts, its default and its doc.

A schema class declares a key as `name: bool = bool_field(False, "doc")`; the
parser reads the spec from the attrs metadata, so a key is declared once.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

import attrs
from attrs import frozen

from ascend_core.errors import ConfigError

SPEC = "ascend_config_spec"


def _shown(value: object) -> str:
    """A value as it would be written in JSON, shortened for messages."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    else:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_hint(value: object) -> str:
    if isinstance(value, bool):
        return "give a number: JSON true/false are booleans, not integers"
    if isinstance(value, float) and value.is_integer():
        return f"write {int(value)} without a decimal point"
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return f"write {value.strip()} without quotes: a JSON number, not a string"
    return "give a whole number"


class FieldSpec(abc.ABC):
    """What one scalar key accepts. `read` returns the typed value or raises ConfigError."""

    doc: str

    @abc.abstractmethod
    def expected(self) -> str:
        """What the key accepts, in words, for messages and the doctor."""

    @abc.abstractmethod
    def read(self, value: object, path: str) -> object:
        """The typed value of `value` found at dotted `path`."""


@frozen
class BoolSpec(FieldSpec):
    doc: str

    def expected(self) -> str:
        return "true or false"

    def read(self, value: object, path: str) -> object:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            hint = f"write {value.strip().lower()} without quotes: a JSON boolean, not a string"
        elif _is_int(value) and value in (0, 1):
            hint = f"write {'true' if value else 'false'} instead of {value}"
        else:
            hint = "write true or false"
        raise ConfigError(f"{path} must be true or false, got {_shown(value)}.", hint)


@frozen
class IntSpec(FieldSpec):
    doc: str
    minimum: int | None = None
    maximum: int | None = None

    def expected(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f"an integer from {self.minimum} to {self.maximum}"
        if self.minimum is not None:
            return f"an integer >= {self.minimum}"
        return "an integer"

    def read(self, value: object, path: str) -> object:
        if not _is_int(value):
            raise ConfigError(
                f"{path} must be {self.expected()}, got {_shown(value)}.", _int_hint(value)
            )
        too_low = self.minimum is not None and value < self.minimum
        too_high = self.maximum is not None and value > self.maximum
        if too_low or too_high:
            raise ConfigError(
                f"{path} must be {self.expected()}, got {value}.",
                f"set it to {self.expected()}, or remove the key to use the default",
            )
        return value


@frozen
class PathSpec(FieldSpec):
    """A file path, or null for none; existence is checked where files are read."""

    doc: str

    def expected(self) -> str:
        return "a non-empty path string or null"

    def read(self, value: object, path: str) -> object:
        if value is None or (isinstance(value, str) and value.strip()):
            return value
        raise ConfigError(
            f"{path} must be {self.expected()}, got {_shown(value)}.",
            "give the path of the file, or remove the key",
        )


@frozen
class AscendingIntsSpec(FieldSpec):
    """A list of positive integers in strictly ascending order (so no repeats)."""

    doc: str

    def expected(self) -> str:
        return "a list of positive integers in ascending order without repeats"

    def read(self, value: object, path: str) -> object:
        if not isinstance(value, Sequence) or isinstance(value, str | bytes):
            raise ConfigError(
                f"{path} must be {self.expected()}, got {_shown(value)}.",
                "write a JSON list such as [1, 2, 4, 8]",
            )
        previous = 0
        for index, item in enumerate(value):
            if not _is_int(item) or item <= 0:
                raise ConfigError(
                    f"{path}[{index}] must be a positive integer, got {_shown(item)}.",
                    _int_hint(item) if not _is_int(item) else "use sizes of 1 or more",
                )
            if item <= previous:
                raise ConfigError(
                    f"{path} must be ascending without repeats, but {path}[{index}]={item} "
                    f"follows {previous}.",
                    f"sort the list and drop repeats: {sorted(set(_ints(value)))}",
                )
            previous = item
        return tuple(value)


def _ints(values: Sequence[object]) -> list[int]:
    return [v for v in values if _is_int(v) and v > 0]


@frozen
class SectionSpec:
    """A nested mapping whose keys are the fields of `schema`; the parser walks it."""

    doc: str
    schema: type[Any]

    def expected(self) -> str:
        return "a mapping (JSON object) or null for the defaults"


def bool_field(default: bool, doc: str) -> Any:
    return attrs.field(default=default, metadata={SPEC: BoolSpec(doc)})


def int_field(
    default: int, doc: str, minimum: int | None = None, maximum: int | None = None
) -> Any:
    return attrs.field(default=default, metadata={SPEC: IntSpec(doc, minimum, maximum)})


def path_field(doc: str) -> Any:
    return attrs.field(default=None, metadata={SPEC: PathSpec(doc)})


def ascending_ints_field(doc: str) -> Any:
    return attrs.field(default=(), metadata={SPEC: AscendingIntsSpec(doc)})


def section_field(schema: type[Any], doc: str) -> Any:
    return attrs.field(factory=schema, metadata={SPEC: SectionSpec(doc, schema)})


def specs_of(schema: type[Any]) -> Mapping[str, FieldSpec | SectionSpec]:
    """Key name to spec for every key field of a schema class, in declaration order.

    Fields without a spec (bookkeeping such as AscendConfig.explicit) are not keys.
    """
    return {f.name: f.metadata[SPEC] for f in attrs.fields(schema) if SPEC in f.metadata}
