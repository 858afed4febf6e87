"""Shared libraries of the operating system (not Python packages) that a dependency loads."""

from __future__ import annotations

import abc


class SystemLibraries(abc.ABC):
    """Answers where the dynamic loader would find a library, without loading it."""

    @abc.abstractmethod
    def locate(self, soname: str) -> str | None:
        """The path the loader would open for `soname` (e.g. `libibverbs.so.1`), None when
        it would find none."""
