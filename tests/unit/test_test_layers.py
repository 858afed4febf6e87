"""The test layers are directories, each with its make target: `make unit`,
`make integration` and `make e2e` together run what `make test` runs (docs/testing.md)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
LAYERS = ("unit", "integration", "e2e")


def test_every_test_module_lies_in_one_layer() -> None:
    modules = list(TESTS.rglob("test_*.py"))
    assert modules
    outside = [m for m in modules if m.relative_to(TESTS).parts[0] not in LAYERS]
    assert not outside, outside


def test_each_layer_has_its_make_target_running_its_directory() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for layer in LAYERS:
        recipe = re.search(rf"^{layer}: venv\n\t(.+)$", makefile, flags=re.M)
        assert recipe, layer
        runs = f"$(BIN)/python scripts/run_suite.py --layer {layer} $(if $(JOBS),--jobs $(JOBS))"
        assert recipe[1] == runs + " $(PYTEST_ARGS)", recipe[1]
        assert set(_run_suite().test_modules(layer)) == set((TESTS / layer).rglob("test_*.py"))
    test = re.search(r"^test: venv lint\n\t(.+)$", makefile, flags=re.M)
    runs = "$(BIN)/python scripts/run_suite.py $(if $(JOBS),--jobs $(JOBS)) $(PYTEST_ARGS)"
    assert test and test[1] == runs, test
    testpaths = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'testpaths = ["tests"]' in testpaths


def test_the_e2e_marker_is_the_e2e_layer() -> None:
    """`-m e2e` and `make e2e` select the same modules."""
    mark = "pytest.mark." + "e2e"  # spelled apart so that this module does not carry it
    for module in TESTS.rglob("test_*.py"):
        marked = mark in module.read_text(encoding="utf-8")
        in_e2e = module.relative_to(TESTS).parts[0] == "e2e"
        assert marked == in_e2e, module


def test_test_module_names_are_unique_across_the_tree() -> None:
    """pytest imports test modules by basename (no packages under tests/): two files of one
    name in different directories stop the whole collection with 'import file mismatch'."""
    names = [m.name for m in TESTS.rglob("*.py") if m.name != "__init__.py"
             and "support" not in m.relative_to(TESTS).parts and m.name != "conftest.py"]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def _run_suite():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("run_suite", ROOT / "scripts" / "run_suite.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_tests_chunks_hold_every_test_module_once() -> None:
    """`make test` (scripts/run_suite.py) runs each module of tests/ in exactly one chunk;
    a module no chunk names lands in the last chunk, never nowhere."""
    suite = _run_suite()
    modules = sorted(TESTS.rglob("test_*.py"))
    chunks = suite.partition(modules)
    placed = [m for mods in chunks.values() for m in mods]
    assert sorted(placed) == modules and len(placed) == len(set(placed))
    stray = suite.partition([*modules, TESTS / "integration" / "newdir" / "test_new.py"])
    assert TESTS / "integration" / "newdir" / "test_new.py" in stray[suite.CHUNKS[-1][0]]


def test_every_path_a_chunk_names_exists() -> None:
    """A renamed module would silently move to the last chunk and unbalance the queue."""
    suite = _run_suite()
    named = [p for table in (suite.CHUNKS, suite.UNIT_CHUNKS) for _, paths in table for p in paths]
    missing = [p for p in named if not (TESTS / p).exists()]
    assert missing == []


def test_make_unit_runs_every_unit_module_once() -> None:
    """`make unit` splits tests/unit in two chunks; together they hold each unit module once."""
    suite = _run_suite()
    modules = suite.test_modules("unit")
    chunks = suite.partition(modules, suite.UNIT_CHUNKS)
    placed = [m for mods in chunks.values() for m in mods]
    assert sorted(placed) == modules and len(placed) == len(set(placed))
    assert set(chunks) == {"unit-adapters", "unit-core"}
