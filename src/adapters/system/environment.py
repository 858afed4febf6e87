"""The Environment port over the process environment."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from ports.environment import Environment


class OsEnvironment(Environment):
    """Reads `os.environ` live (or the mapping given, for tools that pass one explicitly)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ

    def get(self, name: str) -> str | None:
        return self._environ.get(name)

    def names(self) -> Iterable[str]:
        return tuple(self._environ.keys())
