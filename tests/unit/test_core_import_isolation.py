"""Importing the core (every module of ascend_core and ports) loads neither torch nor vllm."""

import subprocess
import sys

PROBE = """
import importlib, pkgutil, sys
import ascend_core, ports
for pkg in (ascend_core, ports):
    for mod in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        importlib.import_module(mod.name)
heavy = sorted(m for m in ("torch", "torch_npu", "vllm", "adapters") if m in sys.modules)
print(",".join(heavy))
"""


def test_core_and_ports_import_without_torch_vllm_or_adapters():
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"importing the core loaded: {out}"


def test_core_source_names_no_heavy_module_even_for_type_checking():
    import ast
    from pathlib import Path

    core = Path(__file__).resolve().parents[2] / "src" / "ascend_core"
    found = []
    for path in core.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [
                f"{path.name}: {n}"
                for n in names
                if n.split(".")[0] in ("torch", "torch_npu", "vllm", "adapters")
            ]
    assert found == []


def test_core_and_ports_name_no_adapter_module_even_in_a_string():
    """The core decides (which patch, which connector, which model row); the adapters say
    where their code lives (patches/table.py, kv_transfer/, models/MODEL_CLASSES). A module
    path in a string is a dependency upward that import-linter cannot see."""
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src"
    found = [
        f"{path.relative_to(src)}:{number}: {line.strip()}"
        for package in ("ascend_core", "ports")
        for path in sorted((src / package).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "adapters." in line
    ]
    assert found == [], "the core names adapter modules:\n" + "\n".join(found)
