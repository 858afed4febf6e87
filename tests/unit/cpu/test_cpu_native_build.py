"""The native kernels' build, without a compiler: the extension table against the
sources, the schema table against the .cpp files, what the wheel ships, and how a load
is announced and a failure logged (the loader is a stand-in)."""

from __future__ import annotations

import logging
import re
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest

from adapters.cpu import native
from adapters.cpu.native import EXTENSIONS, Extension, NativeKernels

NATIVE = Path(native.__file__).parent
PYPROJECT = NATIVE.parents[3] / "pyproject.toml"
_DEF = re.compile(r'm\.def\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)')
_ROW = re.compile(r"^\| `([^`]+)` \| (\S+) \| (\S+) \|$")


def _schemas_in_sources() -> set[tuple[str, str, str]]:
    owner = {source: name for name, ext in EXTENSIONS.items() for source in ext.sources}
    rows = set()
    for cpp in sorted(NATIVE.glob("*.cpp")):
        for match in _DEF.finditer(cpp.read_text()):
            schema = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', match.group(1)))
            rows.add((schema, cpp.name, owner[cpp.name]))
    return rows


def test_every_source_is_in_exactly_one_extension() -> None:
    listed = [source for ext in EXTENSIONS.values() for source in ext.sources]
    assert sorted(listed) == sorted(p.name for p in NATIVE.glob("*.cpp"))
    assert len(set(listed)) == len(listed)


def test_every_accessor_an_extension_serves_exists() -> None:
    for ext in EXTENSIONS.values():
        for accessor in ext.serves:
            assert callable(getattr(native, accessor)), accessor


def test_the_readme_lists_every_op_schema_as_the_sources_define_it() -> None:
    readme = (NATIVE / "README.md").read_text().splitlines()
    listed = {m.groups() for m in map(_ROW.match, readme) if m}
    expected = _schemas_in_sources()
    paste = "\n".join(f"| `{s}` | {f} | {e} |" for s, f, e in sorted(expected))
    assert listed == expected, f"README.md's schema table should read:\n{paste}"
    assert len(expected) >= 16  # the parse found the ops (16 when this was written)


def test_every_op_is_a_fragment_of_one_namespace() -> None:
    # TORCH_LIBRARY (not a fragment) may appear once per namespace in a process: with
    # the extensions loaded separately, each must add a fragment.
    for cpp in NATIVE.glob("*.cpp"):
        text = cpp.read_text()
        assert "TORCH_LIBRARY(" not in text, cpp.name
        if "m.def(" in text:
            assert "TORCH_LIBRARY_FRAGMENT(ascend_host_native, m)" in text, cpp.name


def test_the_wheel_ships_every_file_a_build_includes() -> None:
    # pyproject's [tool.setuptools.package-data] lines for this package and for all
    # (read as text: tomllib is not in Python 3.10's standard library).
    lines = re.findall(r'^"(adapters\.cpu\.native|\*)" = \[(.*)\]$', PYPROJECT.read_text(), re.M)
    globs = [glob for _, listed in lines for glob in re.findall(r'"([^"]+)"', listed)]
    assert any(package == "adapters.cpu.native" for package, _ in lines)
    needed = {p.name for p in NATIVE.glob("*.cpp")}
    for source in list(NATIVE.glob("*.cpp")) + list(NATIVE.glob("*.h")):
        for header in re.findall(r'#include "([^"]+)"', source.read_text()):
            assert (NATIVE / header).exists(), f"{source.name} includes {header}"
            needed.add(header)
    unshipped = sorted(n for n in needed if not any(fnmatch(n, g) for g in globs))
    assert not unshipped, f"pyproject's package-data leaves out {unshipped}"


class Loader:
    """A stand-in for cpp_extension.load: records its calls, fails for some names."""

    def __init__(self, failing: str = "") -> None:
        self.calls: list[dict[str, Any]] = []
        self.failing = failing

    def __call__(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)
        if self.failing and self.failing in kwargs["name"]:
            raise RuntimeError(
                f"Error building extension '{kwargs['name']}':\n[1/2] c++ -c bad.cpp\n"
                "bad.cpp:3:1: error: 'garbage' does not name a type\n"
                "ninja: build stopped: subcommand failed."
            )


EXTS = {
    "good": Extension(("good.cpp",), ("good_op",), "the torch good path", 10),
    "bad": Extension(("bad.cpp", "bad_helper.cpp"), ("bad_op", "bad_pack"), "torch", 20),
}


def test_one_failing_extension_costs_only_itself_and_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    loader = Loader(failing="_bad_")
    kernels = NativeKernels(tmp_path, EXTS, load_library=loader)
    with caplog.at_level(logging.INFO, logger="vllm.plugins.ascend"):
        assert kernels.load("bad") is False
        assert kernels.load("bad") is False  # kept: not rebuilt, not logged again
        assert kernels.load("good") is True
    assert sorted(c["sources"] for c in loader.calls) == [  # each built once, both at once
        [str(tmp_path / "bad.cpp"), str(tmp_path / "bad_helper.cpp")],
        [str(tmp_path / "good.cpp")],
    ]
    notes = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert notes == [
        "Host native kernel bad (bad_op, bad_pack) unavailable (RuntimeError: bad.cpp:3:1: "
        "error: 'garbage' does not name a type); the host runs torch instead."
    ]


def test_the_first_cold_build_is_announced_once_with_its_cache(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    kernels = NativeKernels(tmp_path, EXTS, load_library=Loader())
    with caplog.at_level(logging.INFO, logger="vllm.plugins.ascend"):
        kernels.load("good")
        kernels.load("bad")
    notes = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    assert len(notes) == 1
    assert "about 15 s on 2 cores" in notes[0] and str(tmp_path / "ext") in notes[0]


def test_cached_builds_are_not_announced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    for extension in EXTS:
        name = f"vllm_ascend_host_{extension}_{native._cpu_key()}"
        (tmp_path / "ext" / name).mkdir(parents=True)
        (tmp_path / "ext" / name / f"{name}.so").touch()
    with caplog.at_level(logging.INFO, logger="vllm.plugins.ascend"):
        assert NativeKernels(tmp_path, EXTS, load_library=Loader()).load("good")
    assert not [r for r in caplog.records if "Compiling" in r.getMessage()]


def test_a_failure_reason_is_the_compilers_first_error_else_the_last_line() -> None:
    assert native._reason(OSError("no such file\nninja: not found")) == (
        "OSError: ninja: not found"
    )
    assert native._reason(RuntimeError("")) == "RuntimeError"


def test_a_native_build_here_would_reach_the_refusing_compiler() -> None:
    """tests/unit/conftest.py's guard is in place: torch's extension builds take CXX."""
    from torch.utils import cpp_extension

    assert cpp_extension.get_cxx_compiler().endswith("refuse-cxx")


def test_a_lock_left_by_a_killed_build_is_removed_and_a_fresh_one_kept(tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    from adapters.cpu.native import STALE_LOCK_SECONDS, clear_stale_lock

    lock = tmp_path / "lock"
    lock.touch()
    made = lock.stat().st_mtime
    assert not clear_stale_lock(tmp_path, now=made + 5)  # a build in progress: its lock stays
    assert lock.exists()
    with caplog.at_level(logging.WARNING):
        assert clear_stale_lock(tmp_path, now=made + STALE_LOCK_SECONDS + 1)
    assert not lock.exists() and "was killed before it finished" in caplog.text
    assert not clear_stale_lock(tmp_path) and not clear_stale_lock(None)


def test_a_lock_no_process_holds_is_removed_past_the_margin_and_a_held_one_kept(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from adapters.cpu.native import UNHELD_LOCK_SECONDS, clear_stale_lock

    lock = tmp_path / "lock"
    lock.touch()
    made = lock.stat().st_mtime
    late = made + UNHELD_LOCK_SECONDS + 1
    assert not clear_stale_lock(tmp_path, now=made + 1, held=lambda _: False)  # just made
    assert not clear_stale_lock(tmp_path, now=late, held=lambda _: True)  # a live build
    assert not clear_stale_lock(tmp_path, now=late, held=lambda _: None)  # /proc cannot say
    assert lock.exists()
    assert clear_stale_lock(tmp_path, now=late, held=lambda _: False)  # a killed build's
    assert not lock.exists()


def test_lock_is_held_while_this_process_has_it_open(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os

    from adapters.cpu.native import lock_is_held

    lock = tmp_path / "lock"
    fd = os.open(lock, os.O_CREAT | os.O_EXCL)  # as torch's FileBaton makes it
    try:
        assert lock_is_held(lock) is True
    finally:
        os.close(fd)
    assert lock_is_held(lock) is False
    assert lock_is_held(lock, proc=tmp_path / "no-proc") is None


def test_the_wait_ends_as_a_live_build_releases_or_a_killed_ones_lock_goes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import threading

    from adapters.cpu.native import UNHELD_LOCK_SECONDS, wait_for_build_lock

    lock = tmp_path / "lock"
    lock.touch()
    old = lock.stat().st_mtime - UNHELD_LOCK_SECONDS - 1
    os.utime(lock, (old, old))
    released = threading.Timer(0.05, lock.unlink)
    released.start()
    wait_for_build_lock(tmp_path, held=lambda _: True, poll=0.01)  # the build ends
    released.join()
    assert not lock.exists()
    lock.touch()
    os.utime(lock, (old, old))
    wait_for_build_lock(tmp_path, held=lambda _: False, poll=0.01)  # its builder was killed
    assert not lock.exists()
    wait_for_build_lock(None)
