"""MetadataUpstream: versions, symbols by import only, and the CANN version file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from adapters.system import MetadataUpstream, OsEnvironment
from adapters.system.upstream import read_cann_version


def upstream(env: dict[str, str] | None = None, homes: tuple[str, ...] = ()) -> MetadataUpstream:
    return MetadataUpstream(OsEnvironment(env or {}), cann_homes=homes)


def test_version_of_installed_and_absent_distributions() -> None:
    assert upstream().version("attrs") is not None
    assert upstream().version("no-such-distribution-here") is None


@pytest.mark.parametrize(
    ("dotted", "exists"),
    [
        ("json:JSONDecoder.decode", True),
        ("json.decoder:JSONDecoder.raw_decode", True),
        ("json.JSONDecoder.decode", True),
        ("json:JSONDecoder.nope", False),
        ("json:nope", False),
        ("no_such_module_xyz:f", False),
        ("no_such_module_xyz.f", False),
        ("email:message.Message", True),  # a submodule its package has not imported
        (":f", False),
    ],
)
def test_has_symbol(dotted: str, exists: bool) -> None:
    assert upstream().has_symbol(dotted) is exists


def test_has_symbol_runs_no_property_or_module_getattr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "probe_mod_for_upstream.py").write_text(
        "CALLS = []\n"
        "class C:\n"
        "    @property\n"
        "    def p(self):\n"
        "        CALLS.append('p')\n"
        "        return 1\n"
        "def __getattr__(name):\n"
        "    CALLS.append(name)\n"
        "    return 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        u = upstream()
        assert u.has_symbol("probe_mod_for_upstream:C.p")
        assert not u.has_symbol("probe_mod_for_upstream:lazy_name")
        assert sys.modules["probe_mod_for_upstream"].CALLS == []
    finally:
        sys.modules.pop("probe_mod_for_upstream", None)


def test_module_that_fails_to_import_has_no_symbols(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_mod_for_upstream.py").write_text("raise RuntimeError('no device')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not upstream().has_symbol("broken_mod_for_upstream:f")


def write_toolkit(home: Path, version: str) -> None:
    info = home / "aarch64-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir(parents=True)
    info.write_text(f"package_name=Ascend-cann-toolkit\nversion={version}\narch=aarch64\n")


def test_cann_version_from_ascend_home_path(tmp_path: Path) -> None:
    write_toolkit(tmp_path, "9.1.0")
    assert upstream({"ASCEND_HOME_PATH": str(tmp_path)}).cann_version() == "9.1.0"


def test_cann_version_from_default_home(tmp_path: Path) -> None:
    write_toolkit(tmp_path, "8.3.RC1")
    assert upstream(homes=(str(tmp_path / "absent"), str(tmp_path))).cann_version() == "8.3.RC1"


def test_cann_version_from_older_version_info(tmp_path: Path) -> None:
    (tmp_path / "compiler").mkdir()
    (tmp_path / "compiler" / "version.info").write_text("Version=8.0.RC2\n")
    assert read_cann_version(tmp_path) == "8.0.RC2"


def test_no_cann_anywhere(tmp_path: Path) -> None:
    assert (
        upstream({"ASCEND_HOME_PATH": str(tmp_path / "x")}, (str(tmp_path),)).cann_version() is None
    )
