"""Reading registered variables through the Environment port into typed values."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from attrs import frozen

from ascend_core.env.variables import EnvVar
from ascend_core.errors import AscendError, EnvironmentVariableError, PlanErrors
from ports.environment import Environment


@frozen
class ResolvedVar:
    """The value one variable takes here, and whether the environment set it."""

    name: str
    value: object
    text: str  # as written in the environment, or the default as one would write it
    from_environment: bool

    def describe(self) -> str:
        """'NAME=text (set)' or 'NAME=text (default)', for logs."""
        source = "set" if self.from_environment else "default"
        return f"{self.name}={self.text} ({source})"


def resolve(env: Environment, registry: Iterable[EnvVar[Any]]) -> tuple[ResolvedVar, ...]:
    """Every registered variable's value; all bad values reported together.

    One bad value raises EnvironmentVariableError; several raise PlanErrors
    holding one EnvironmentVariableError each.
    """
    resolved: list[ResolvedVar] = []
    errors: list[AscendError] = []
    for var in registry:
        raw = env.get(var.name)
        if raw is None:
            resolved.append(ResolvedVar(var.name, var.default, var.default_text(), False))
            continue
        try:
            resolved.append(ResolvedVar(var.name, var.parse(raw), raw, True))
        except ValueError:
            errors.append(
                EnvironmentVariableError(
                    f"{var.name}={raw!r} is not accepted; it takes {var.accepted}.",
                    f"set {var.name} to {var.accepted}, or unset it to use the default "
                    f"{var.default_text()} ({var.doc})",
                )
            )
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise PlanErrors(errors)
    return tuple(resolved)
