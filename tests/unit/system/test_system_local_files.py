"""OsLocalFiles: a path is readable when it is an existing regular file with read access."""

from __future__ import annotations

import os

import pytest

from adapters.system.local_files import OsLocalFiles


def test_an_existing_file_is_readable(tmp_path):
    path = tmp_path / "map.json"
    path.write_text("{}")
    assert OsLocalFiles().is_readable_file(str(path))


def test_a_missing_path_and_a_directory_are_not(tmp_path):
    assert not OsLocalFiles().is_readable_file(str(tmp_path / "missing.json"))
    assert not OsLocalFiles().is_readable_file(str(tmp_path))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_a_file_without_read_permission_is_not(tmp_path):
    path = tmp_path / "map.json"
    path.write_text("{}")
    path.chmod(0)
    assert not OsLocalFiles().is_readable_file(str(path))
