"""The process environment, read through a port so tests can fabricate one."""

from __future__ import annotations

import abc
from collections.abc import Iterable


class Environment(abc.ABC):
    """Read-only view of environment variables."""

    @abc.abstractmethod
    def get(self, name: str) -> str | None:
        """The value of `name`, or None when unset."""

    @abc.abstractmethod
    def names(self) -> Iterable[str]:
        """Every variable name that is set."""
