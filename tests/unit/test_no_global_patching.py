"""No test patches a module global of ours: tests swap adapters with
`container().X.override(fake)` or pass what they need as parameters. Environment variables
(monkeypatch.setenv) and attributes of objects a test holds are fine."""

from __future__ import annotations

import ast
from pathlib import Path

from support.parsed_sources import syntax_nodes, syntax_tree

TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"
OURS = ("adapters", "ascend_core", "ports")
PATCHERS = {"setattr", "delattr", "patch", "object"}  # monkeypatch.*, mock.patch(.object)
# Where a module global is still the only seam: (file name, patched name) -> what would
# replace it. Keyed by file name, so a test file that moves keeps its entry.
KNOWN: dict[str, str] = {}


def _is_ours(dotted: str) -> bool:
    return dotted.split(".")[0] in OURS


def _is_module(dotted: str) -> bool:
    """Whether `dotted` names a module of our source tree (read from the files: importing
    the adapters would import torch and vLLM)."""
    path = SRC.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _our_modules(tree: ast.Module) -> set[str]:
    """Local names bound to modules of our packages (`from adapters.vllm.engine import config_plan`,
    `import adapters.vllm.engine.translate as translate`)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(
                a.asname or a.name.split(".")[0] for a in node.names if _is_ours(a.name)
            )
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_ours(node.module or ""):
            for a in node.names:
                if _is_module(f"{node.module}.{a.name}"):
                    names.add(a.asname or a.name)
    return names


def _patches_of_our_globals(path: Path) -> list[str]:
    tree = syntax_tree(path)
    modules = _our_modules(tree)
    hits = []
    for node in syntax_nodes(path):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in PATCHERS
            and node.args
        ):
            continue
        target = node.args[0]
        if isinstance(target, ast.Name) and target.id in modules and len(node.args) > 1:
            name = node.args[1]
            attr = name.value if isinstance(name, ast.Constant) else "?"
            hits.append(f"{path.name} {target.id}.{attr}")
        elif (
            isinstance(target, ast.Constant)
            and isinstance(target.value, str)
            and _is_ours(target.value)
        ):
            hits.append(f"{path.name} {target.value}")
    return hits


def test_no_test_patches_a_module_global_of_ours() -> None:
    found = [hit for path in sorted(TESTS.rglob("*.py")) for hit in _patches_of_our_globals(path)]
    # (A patch of another module, vLLM's or torch's, is the edge a test may still mock.)
    unknown = sorted(set(found) - set(KNOWN))
    assert not unknown, (
        "these tests patch a module global of ours; override the container's provider or "
        "pass the dependency instead: " + "; ".join(unknown)
    )
    gone = sorted(set(KNOWN) - set(found))
    assert not gone, f"no longer patched (good): remove them from KNOWN: {gone}"


def test_the_scan_sees_a_patch_of_our_module(tmp_path: Path) -> None:
    """Guards the scan with the three spellings it looks for."""
    source = (
        "from adapters.vllm.engine import configure\n"
        "import adapters.vllm.engine.translate as translate\n"
        "def test(monkeypatch, mocker):\n"
        "    monkeypatch.setattr(configure, 'plan_for', None)\n"
        "    monkeypatch.setattr(translate, 'deployment', None)\n"
        "    mocker.patch('adapters.container.container')\n"
        "    monkeypatch.setattr(object(), 'x', 1)\n"  # an object the test holds: fine
    )
    (tmp_path / "scan_probe.py").write_text(source)
    assert _patches_of_our_globals(tmp_path / "scan_probe.py") == [
        "scan_probe.py configure.plan_for",
        "scan_probe.py translate.deployment",
        "scan_probe.py adapters.container.container",
    ]
