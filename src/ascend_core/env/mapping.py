"""The Environment port over a plain mapping, for values the adapter already collected."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ports.environment import Environment


class MappingEnvironment(Environment):
    """Exactly the variables of `values`."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self._values = dict(values)

    def get(self, name: str) -> str | None:
        return self._values.get(name)

    def names(self) -> Iterable[str]:
        return tuple(self._values)
