"""The core's table of vLLM's Model Runner V2 Triton kernels is complete for the installed
vLLM, and docs/npu-ops.md lists it row by row (the sources are read, not imported)."""

from __future__ import annotations

import ast
from importlib.util import find_spec
from pathlib import Path

from ascend_core.v2_kernels import KERNELS, PACKAGE, VLLM_VERSION, KernelPath, kernels_summary

DOC = Path(__file__).resolve().parents[3] / "docs" / "npu-ops.md"


def _triton_functions() -> set[str]:
    """module.name of each function under vllm/v1/worker/gpu decorated with triton.jit
    (or triton.heuristics/autotune over it), by reading the installed sources."""
    spec = find_spec("vllm")
    assert spec is not None and spec.origin is not None
    root = Path(spec.origin).parent / PACKAGE.removeprefix("vllm/")
    found: set[str] = set()
    for path in root.rglob("*.py"):
        module = path.relative_to(root).with_suffix("").as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                ast.unparse(d).startswith(("triton.jit", "triton.heuristics", "triton.autotune"))
                for d in node.decorator_list
            ):
                found.add(f"{module}.{node.name}")
    return found


def test_the_table_names_every_v2_triton_function_of_the_installed_vllm_once() -> None:
    names = [f"{k.module}.{k.name}" for k in KERNELS]
    assert len(names) == len(set(names))
    assert set(names) == _triton_functions()
    assert VLLM_VERSION == "0.33.0"


def test_the_summary_and_the_docs_table_say_the_same() -> None:
    assert kernels_summary().startswith(f"vLLM 0.33.0's V2 runner: {len(KERNELS)} Triton")
    assert all(k.path is KernelPath.TRITON_ASCEND and not k.lowered for k in KERNELS)
    text = DOC.read_text()
    for k in KERNELS:
        ran = "yes" if k.exercised else "no"
        row = f"| `{k.module}.{k.name}` | {k.role} | {k.path.value} | {ran} |"
        assert row in text, row
