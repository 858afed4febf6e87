"""The LocalFiles port over this machine's file system."""

from __future__ import annotations

import os

from ports.local_files import LocalFiles


class OsLocalFiles(LocalFiles):
    """A path is readable when it is a regular file and os.access grants R_OK."""

    def is_readable_file(self, path: str) -> bool:
        expanded = os.path.expanduser(path)
        return os.path.isfile(expanded) and os.access(expanded, os.R_OK)
