"""Fakes of our ports live in tests/unit/fakes, not copied into the test files that use them:
no class under tests/ outside that package subclasses a port (a `ports.*` ABC)."""

from __future__ import annotations

import abc
import ast
import importlib
from pathlib import Path

from support.parsed_sources import syntax_nodes, syntax_tree

TESTS = Path(__file__).resolve().parents[1]
FAKES = TESTS / "unit" / "fakes"
# The emulated NPU runs inside the child processes a test starts (a sitecustomize), where
# the test tree is not importable: its probe stays with it.
SUPPORT = TESTS / "support" / "torch_npu_emulator"


def _port_bases(tree: ast.Module) -> dict[str, str]:
    """Names a module imports from `ports.*` that are abstract port classes -> their path."""
    ports: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ports":
            module = importlib.import_module(node.module or "")
            for alias in node.names:
                obj = getattr(module, alias.name, None)
                if isinstance(obj, type) and issubclass(obj, abc.ABC):
                    ports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return ports


def _port_subclasses(path: Path) -> list[str]:
    tree = syntax_tree(path)
    ports = _port_bases(tree)
    return [
        f"{path.relative_to(TESTS)}:{node.lineno} {node.name}({ports[base.id]})"
        for node in syntax_nodes(path)
        if isinstance(node, ast.ClassDef)
        for base in node.bases
        if isinstance(base, ast.Name) and base.id in ports
    ]


def test_no_test_file_defines_its_own_fake_of_a_port() -> None:
    found = [
        hit
        for path in sorted(TESTS.rglob("*.py"))
        if FAKES not in path.parents and SUPPORT not in path.parents
        for hit in _port_subclasses(path)
    ]
    assert not found, "move these fakes to tests/unit/fakes: " + "; ".join(found)


def test_the_scan_finds_the_shared_fakes() -> None:
    """Guards the scan: the fakes package itself is full of port subclasses."""
    found = [hit for path in sorted(FAKES.glob("*.py")) for hit in _port_subclasses(path)]
    assert any("FakeEnvironment(ports.environment.Environment)" in hit for hit in found), found
