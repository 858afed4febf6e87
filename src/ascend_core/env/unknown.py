"""Set VLLM_ASCEND_* names that nothing reads: misspellings and retired variables."""

from __future__ import annotations

from collections.abc import Iterable

from attrs import frozen

from ascend_core.suggest import did_you_mean
from ports.environment import Environment

PREFIX = "VLLM_ASCEND_"


@frozen
class RetiredVariable:
    """A variable the plugin once read: renamed to `replacement`, or removed when None."""

    name: str
    replacement: str | None
    reason: str


@frozen
class UnknownVariable:
    """A set VLLM_ASCEND_* variable that is not registered, with what to do about it."""

    name: str
    what: str
    hint: str
    replacement: str | None = None


def find_unknown(
    env: Environment, registered: Iterable[str], retired: Iterable[RetiredVariable]
) -> tuple[UnknownVariable, ...]:
    """Every set VLLM_ASCEND_* name outside `registered`, sorted by name."""
    known = tuple(registered)
    retired_by_name = {r.name: r for r in retired}
    found = []
    for name in sorted(set(env.names())):
        if not name.startswith(PREFIX) or name in known:
            continue
        old = retired_by_name.get(name)
        if old is not None:
            found.append(_retired(old))
            continue
        suggestion = did_you_mean(name, known).strip()
        found.append(
            UnknownVariable(
                name,
                f"{name} is set but the Ascend plugin does not read it.",
                suggestion or "unset it; `ascend-doctor` lists the variables the plugin reads",
            )
        )
    return tuple(found)


def _retired(old: RetiredVariable) -> UnknownVariable:
    if old.replacement is None:
        return UnknownVariable(
            old.name,
            f"{old.name} was removed: {old.reason}.",
            f"unset {old.name}",
        )
    return UnknownVariable(
        old.name,
        f"{old.name} was renamed to {old.replacement}: {old.reason}.",
        f"set {old.replacement} instead and unset {old.name}",
        old.replacement,
    )
