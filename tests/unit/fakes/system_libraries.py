"""FakeSystemLibraries: the shared libraries a test says the loader finds."""

from __future__ import annotations

from collections.abc import Mapping

from ports.system_libraries import SystemLibraries


class FakeSystemLibraries(SystemLibraries):
    """Finds exactly the sonames it was given; records each one asked about."""

    def __init__(self, found: Mapping[str, str] | None = None) -> None:
        self._found = dict(found or {})
        self.asked: list[str] = []

    def locate(self, soname: str) -> str | None:
        self.asked.append(soname)
        return self._found.get(soname)
