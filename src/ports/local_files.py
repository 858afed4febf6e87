"""Files on this machine that a configuration names, checked without reading them."""

from __future__ import annotations

import abc


class LocalFiles(abc.ABC):
    """Answers whether a path names a file this process can read."""

    @abc.abstractmethod
    def is_readable_file(self, path: str) -> bool:
        """True when `path` is an existing regular file readable by this process."""
