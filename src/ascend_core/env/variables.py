"""A typed environment variable (`EnvVar`) and the constructors for each value type."""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable
from typing import Generic, TypeVar

from attrs import frozen

T = TypeVar("T")
E = TypeVar("E", bound=enum.Enum)

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_INT = re.compile(r"[+-]?[0-9]+")


class VarType(enum.Enum):
    """The value types a registered variable may have."""

    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    STR = "str"
    CHOICE = "choice"


@frozen
class EnvVar(Generic[T]):
    """One VLLM_ASCEND_* variable: its name, type, default and a one-line doc.

    `parse` turns the raw text into the typed value and raises ValueError on
    anything else; `accepted` says, for error messages, what it takes.
    `no_effect` is set (to the reason) for a variable this build registers because the
    reference plugin reads it, but does not act on; `deprecated` names what the
    reference plugin says to use instead. `owner` names the software that defines a
    variable from outside this plugin (CANN, torch_npu), which the plan reads but does
    not own; None for this plugin's own VLLM_ASCEND_* variables.
    """

    name: str
    type: VarType
    default: T
    doc: str
    accepted: str
    parse: Callable[[str], T]
    no_effect: str | None = None
    deprecated: str | None = None
    owner: str | None = None

    def default_text(self) -> str:
        """The default as an operator would write it."""
        return _as_text(self.default)

    def no_effect_message(self) -> str | None:
        """What to tell an operator who set this variable, when this build ignores it."""
        if self.no_effect is None:
            return None
        instead = f" vllm-ascend deprecates it for {self.deprecated}." if self.deprecated else ""
        return f"{self.name} is set but has no effect in this build: {self.no_effect}.{instead}"

    def notice(self) -> str | None:
        """What to tell an operator who set this variable: that it does nothing here, or
        that vllm-ascend deprecates it although this build still reads it."""
        ignored = self.no_effect_message()
        if ignored is not None or self.deprecated is None:
            return ignored
        return (
            f"{self.name} is deprecated by vllm-ascend (use {self.deprecated}); "
            "this build still reads it."
        )


def _as_text(value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


def _parse_bool(raw: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(raw)


def _parse_int(raw: str) -> int:
    # A regex rather than int() alone: int() also takes '1_000' and non-ASCII digits.
    text = raw.strip()
    if not _INT.fullmatch(text) or len(text) > 20:
        raise ValueError(raw)
    return int(text)


def _parse_float(raw: str) -> float:
    value = float(raw.strip())
    if not math.isfinite(value):
        raise ValueError(raw)
    return value


def bool_var(
    name: str,
    default: bool,
    doc: str,
    *,
    no_effect: str | None = None,
    deprecated: str | None = None,
) -> EnvVar[bool]:
    """A switch; takes 1/0, true/false, yes/no, on/off in any case."""
    accepted = "1 or 0 (also true/false, yes/no, on/off)"
    return EnvVar(name, VarType.BOOL, default, doc, accepted, _parse_bool, no_effect, deprecated)


def int_var(
    name: str,
    default: int,
    doc: str,
    choices: tuple[int, ...] | None = None,
    *,
    minimum: int | None = None,
    no_effect: str | None = None,
    deprecated: str | None = None,
) -> EnvVar[int]:
    """An integer, optionally restricted to `choices` or to values >= `minimum`."""
    if choices is None and minimum is None:
        return EnvVar(
            name, VarType.INT, default, doc, "an integer", _parse_int, no_effect, deprecated
        )
    allowed = choices
    low = minimum

    def parse(raw: str) -> int:
        value = _parse_int(raw)
        if (allowed is not None and value not in allowed) or (low is not None and value < low):
            raise ValueError(raw)
        return value

    if allowed is not None:
        accepted = "one of " + ", ".join(str(c) for c in allowed)
    else:
        accepted = f"an integer >= {low}"
    return EnvVar(name, VarType.INT, default, doc, accepted, parse, no_effect, deprecated)


def float_var(name: str, default: float, doc: str) -> EnvVar[float]:
    """A finite decimal number."""
    return EnvVar(name, VarType.FLOAT, default, doc, "a finite number", _parse_float)


def str_var(name: str, default: str, doc: str) -> EnvVar[str]:
    """Free text, taken as written."""
    return EnvVar(name, VarType.STR, default, doc, "any text", lambda raw: raw)


def choice_var(
    name: str,
    choices: type[E],
    default: E,
    doc: str,
    *,
    no_effect: str | None = None,
    deprecated: str | None = None,
) -> EnvVar[E]:
    """One member of an enum, written as its value in any case."""
    by_text = {str(member.value).lower(): member for member in choices}

    def parse(raw: str) -> E:
        member = by_text.get(raw.strip().lower())
        if member is None:
            raise ValueError(raw)
        return member

    accepted = "one of " + ", ".join(by_text)
    return EnvVar(name, VarType.CHOICE, default, doc, accepted, parse, no_effect, deprecated)
