"""Specs for the value shapes vllm-ascend's keys take beyond this schema's own: bounded
numbers, closed choices, text (optionally a path with a suffix), optional values and free
JSON objects. Used by ascend_config.reference_keys."""

from __future__ import annotations

from collections.abc import Mapping

from attrs import frozen

from ascend_core.ascend_config.fields import FieldSpec, _shown
from ascend_core.errors import ConfigError


@frozen
class FloatSpec(FieldSpec):
    """A finite number (an integer is taken as a number); bounds are inclusive unless open."""

    doc: str
    minimum: float | None = None
    maximum: float | None = None
    minimum_open: bool = False

    def expected(self) -> str:
        low = "" if self.minimum is None else f"{'>' if self.minimum_open else '>='} {self.minimum}"
        high = "" if self.maximum is None else f"<= {self.maximum}"
        bounds = " and ".join(b for b in (low, high) if b)
        return f"a number {bounds}".strip()

    def read(self, value: object, path: str) -> object:
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            hint = (
                f"write {value.strip()} without quotes: a JSON number, not a string"
                if isinstance(value, str) and _is_number_text(value)
                else "give a number"
            )
            raise ConfigError(f"{path} must be {self.expected()}, got {_shown(value)}.", hint)
        number = float(value)
        too_low = self.minimum is not None and (
            number <= self.minimum if self.minimum_open else number < self.minimum
        )
        too_high = self.maximum is not None and number > self.maximum
        if too_low or too_high or number in (float("inf"), float("-inf")):
            raise ConfigError(
                f"{path} must be {self.expected()}, got {_shown(value)}.",
                f"set it to {self.expected()}, or remove the key to use the default",
            )
        return number


def _is_number_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@frozen
class ChoiceSpec(FieldSpec):
    """One of a closed set of JSON values (strings, integers or null), compared exactly."""

    doc: str
    choices: tuple[object, ...]

    def expected(self) -> str:
        return "one of " + ", ".join(_shown(c) for c in self.choices)

    def read(self, value: object, path: str) -> object:
        for choice in self.choices:
            if type(choice) is type(value) and choice == value:
                return value
        close = ""
        if isinstance(value, str):
            texts = [c for c in self.choices if isinstance(c, str)]
            lowered = [c for c in texts if c.lower() == value.strip().lower()]
            close = f" (did you mean {lowered[0]!r}?)" if lowered else ""
        raise ConfigError(
            f"{path} must be {self.expected()}, got {_shown(value)}.",
            f"use {self.expected()}{close}",
        )


@frozen
class TextSpec(FieldSpec):
    """A string (optionally null, optionally required to end with `suffix`)."""

    doc: str
    nullable: bool = False
    suffix: str = ""

    def expected(self) -> str:
        what = f"a path ending in {self.suffix}" if self.suffix else "a string"
        return f"{what} or null" if self.nullable else what

    def read(self, value: object, path: str) -> object:
        if value is None and self.nullable:
            return None
        if not isinstance(value, str) or (self.suffix and not value.strip()):
            raise ConfigError(
                f"{path} must be {self.expected()}, got {_shown(value)}.",
                "give it as a JSON string, or remove the key",
            )
        if self.suffix and not value.endswith(self.suffix):
            raise ConfigError(
                f"{path}={value!r} must name a {self.suffix} file.",
                f"give the path of the {self.suffix} file",
            )
        return value


@frozen
class OptionalSpec(FieldSpec):
    """`inner`, or null."""

    doc: str
    inner: FieldSpec

    def expected(self) -> str:
        return f"{self.inner.expected()} or null"

    def read(self, value: object, path: str) -> object:
        if value is None:
            return None
        try:
            return self.inner.read(value, path)
        except ConfigError as error:
            raise ConfigError(
                f"{path} must be {self.expected()}, got {_shown(value)}.", error.hint
            ) from None


@frozen
class ObjectSpec(FieldSpec):
    """Any JSON object, taken as given (its contents belong to another tool)."""

    doc: str

    def expected(self) -> str:
        return "a mapping (JSON object)"

    def read(self, value: object, path: str) -> object:
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise ConfigError(
                f"{path} must be {self.expected()}, got {_shown(value)}.",
                'write it as {"key": value, ...}',
            )
        return dict(value)
