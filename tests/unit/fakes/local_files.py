"""FakeLocalFiles: the local-files port over a set of readable paths."""

from __future__ import annotations

from collections.abc import Iterable

from ports.local_files import LocalFiles


class FakeLocalFiles(LocalFiles):
    """Exactly the paths given are readable files; records every path asked about."""

    def __init__(self, readable: Iterable[str] = ()) -> None:
        self.readable = set(readable)
        self.asked: list[str] = []

    def is_readable_file(self, path: str) -> bool:
        self.asked.append(path)
        return path in self.readable
