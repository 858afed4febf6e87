"""A FakeEnvironment: the Environment port over a plain dict."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ports.environment import Environment


class FakeEnvironment(Environment):
    """Holds exactly the variables given; nothing of the real process leaks in."""

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self.values = dict(values or {})

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def names(self) -> Iterable[str]:
        return tuple(self.values)
