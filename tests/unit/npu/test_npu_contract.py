"""Every torch_npu attribute the NPU adapter touches exists in torch_npu 2.14.0.

The adapter reaches torch_npu only as `self._torch_npu` (the injected module).
This reads the adapter's source with ast, collects each `self._torch_npu.<op>` and
`self._torch_npu.npu.<api>`, and checks them against the data extracted from the
wheel; each op call's keywords and positional count are checked against the op's
schema too. Any other use of the module (aliasing it, getattr, an import of
torch_npu) is reported, so a new call cannot slip past.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from adapters.npu.schemas import load_schemas

ADAPTER = Path(__file__).resolve().parents[3] / "src" / "adapters" / "npu"
HANDLE = "_torch_npu"
# The composition root imports torch_npu through this module alone, lazily.
MAY_IMPORT_TORCH_NPU = ("loader.py",)
# torch_npu._C names the adapter uses; the schema file lists ops and torch_npu.npu's API
# only, so each is named here with where the 2.14.0 wheel has it.
C_API = {
    "_weak_ref_tensor": "torch_npu/npu/graphs.py:29 imports it from torch_npu._C",
}
# torch_npu.profiler's names and signatures (scripts/extract_npu_profiler_api.py).
PROFILER_API: dict[str, Any] = json.loads(
    (
        Path(__file__).resolve().parents[2] / "support/torch_npu_emulator/profiler_api_2.14.0.json"
    ).read_text()
)


def _is_handle(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == HANDLE
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def adapter_classes() -> frozenset[str]:
    """The classes the NPU adapter defines: handing `self._torch_npu` to one of their
    constructors is followed, since that class's own uses are checked where it is."""
    return frozenset(
        node.name
        for path in adapter_sources()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
    )


def collect(
    source: str,
    filename: str = "<src>",
    may_import: bool = False,
    classes: frozenset[str] = frozenset(),
) -> tuple[list[tuple[str, int]], list[str]]:
    """(referenced names as 'op', 'npu.api' or '_C.name', with line), problems found."""
    tree = ast.parse(source, filename=filename)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    data = load_schemas()
    ops, api = data["ops"], set(data["python_api"]["torch_npu.npu"])
    refs: list[tuple[str, int]] = []
    problems: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            if not may_import and any(n.split(".")[0] == "torch_npu" for n in names):
                problems.append(f"{filename}:{node.lineno}: imports torch_npu (inject it)")
        if not _is_handle(node):
            continue
        parent = parents[node]
        if isinstance(parent, ast.Assign) and node in parent.targets:
            continue  # self._torch_npu = torch_npu, in the constructor
        if (
            isinstance(parent, ast.Call)
            and parent.args == [node]
            and isinstance(parent.func, ast.Name)
            and parent.func.id in classes
        ):
            continue  # handed to a class of this adapter, checked where it is defined
        if not (isinstance(parent, ast.Attribute) and parent.value is node):
            problems.append(
                f"{filename}:{node.lineno}: self.{HANDLE} used other than as `.attr` "
                "(aliased or passed on), which the check cannot follow"
            )
            continue
        if parent.attr == "_C":
            grand = parents[parent]
            if not (isinstance(grand, ast.Attribute) and grand.value is parent):
                problems.append(f"{filename}:{node.lineno}: torch_npu._C used as a value")
                continue
            refs.append((f"_C.{grand.attr}", node.lineno))
            if grand.attr not in C_API:
                problems.append(f"{filename}:{node.lineno}: torch_npu._C.{grand.attr} not listed")
            continue
        if parent.attr == "profiler":
            problems += _check_profiler(node, parent, parents, filename, refs)
            continue
        if parent.attr == "npu":
            grand = parents[parent]
            if not (isinstance(grand, ast.Attribute) and grand.value is parent):
                problems.append(f"{filename}:{node.lineno}: torch_npu.npu used as a value")
                continue
            name = f"npu.{grand.attr}"
            refs.append((name, node.lineno))
            if grand.attr not in api:
                problems.append(f"{filename}:{node.lineno}: torch_npu.{name} not in 2.14.0")
            continue
        refs.append((parent.attr, node.lineno))
        overloads = ops.get(parent.attr)
        if overloads is None:
            problems.append(f"{filename}:{node.lineno}: torch_npu.{parent.attr} not in 2.14.0")
            continue
        call = parents[parent]
        if isinstance(call, ast.Call) and call.func is parent:
            problems += _check_call(parent.attr, overloads, call, filename)
    return refs, problems


def _check_profiler(
    node: ast.AST,
    parent: ast.Attribute,
    parents: dict[ast.AST, ast.AST],
    filename: str,
    refs: list[tuple[str, int]],
) -> list[str]:
    """`self._torch_npu.profiler.<name>`: a name of 2.14.0's torch_npu.profiler, and a
    call to one of its callables with keywords it takes."""
    line = getattr(node, "lineno", 0)
    grand = parents[parent]
    if not (isinstance(grand, ast.Attribute) and grand.value is parent):
        return [f"{filename}:{line}: torch_npu.profiler used as a value"]
    refs.append((f"profiler.{grand.attr}", line))
    if grand.attr not in PROFILER_API["all"]:
        return [f"{filename}:{line}: torch_npu.profiler.{grand.attr} not in 2.14.0"]
    call = parents[grand]
    params = PROFILER_API["callables"].get(grand.attr)
    if params is None or not (isinstance(call, ast.Call) and call.func is grand):
        return []
    names = {p["name"] for p in params}
    positional = [p["name"] for p in params if not p["keyword_only"]]
    keywords = {k.arg for k in call.keywords}
    if (
        len(call.args) > len(positional)
        or None in keywords
        or not keywords <= names
        or keywords & set(positional[: len(call.args)])
    ):
        return [
            f"{filename}:{line}: torch_npu.profiler.{grand.attr}({len(call.args)} positional, "
            f"keywords {sorted(k or '**' for k in keywords)}) does not match 2.14.0's "
            f"({', '.join(sorted(names))})"
        ]
    return []


def _check_call(name: str, overloads: list[dict], call: ast.Call, filename: str) -> list[str]:
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return [f"{filename}:{call.lineno}: torch_npu.{name} called with *args/**kwargs"]
    keywords = {k.arg for k in call.keywords}
    for overload in overloads:
        params = overload["arguments"]
        positional = [p["name"] for p in params if not p["kwarg_only"]]
        known = {p["name"] for p in params}
        filled = set(positional[: len(call.args)]) | keywords
        required = {p["name"] for p in params if not p["has_default"]}
        if (
            len(call.args) <= len(positional)
            and keywords <= known
            and not keywords & set(positional[: len(call.args)])
            and required <= filled
        ):
            return []
    return [
        f"{filename}:{call.lineno}: torch_npu.{name}({len(call.args)} positional, "
        f"keywords {sorted(keywords)}) matches no 2.14.0 schema"
    ]


def adapter_sources() -> list[Path]:
    return sorted(ADAPTER.rglob("*.py"))


def test_every_torch_npu_reference_in_the_adapter_exists_in_2_14_0():
    all_refs, all_problems = [], []
    classes = adapter_classes()
    for path in adapter_sources():
        refs, problems = collect(
            path.read_text(encoding="utf-8"),
            path.name,
            path.name in MAY_IMPORT_TORCH_NPU,
            classes,
        )
        all_refs += refs
        all_problems += problems
    assert not all_problems, "\n".join(all_problems)
    names = {n for n, _ in all_refs}
    # The check saw the calls this adapter is known to make (guards against a
    # collector that silently finds nothing).
    assert {
        "npu_rms_norm",
        "npu_add_rms_norm",
        "npu_swiglu",
        "npu_rotary_mul",
        "npu_scatter_nd_update_",
        "npu_fused_infer_attention_score",
        "npu.set_device",
        "npu.mem_get_info",
        "profiler.profile",
        "profiler._ExperimentalConfig",
    } <= names


def test_a_made_up_op_and_api_are_caught():
    source = (
        "class X:\n"
        "    def __init__(self, torch_npu):\n"
        "        self._torch_npu = torch_npu\n"
        "    def f(self, x):\n"
        "        self._torch_npu.npu_rms_norm(x, x, epsilon=1e-6)\n"
        "        self._torch_npu.npu_made_up_op(x)\n"
        "        self._torch_npu.npu.not_an_api()\n"
    )
    refs, problems = collect(source)
    assert [n for n, _ in refs] == ["npu_rms_norm", "npu_made_up_op", "npu.not_an_api"]
    assert problems == [
        "<src>:6: torch_npu.npu_made_up_op not in 2.14.0",
        "<src>:7: torch_npu.npu.not_an_api not in 2.14.0",
    ]


def test_a_wrong_keyword_or_too_many_positionals_are_caught():
    source = (
        "def f(self, x):\n"
        "    self._torch_npu.npu_rms_norm(x, x, eps=1e-6)\n"
        "    self._torch_npu.npu_swiglu(x, -1, 2)\n"
        "    self._torch_npu.npu_fused_infer_attention_score(x, x, x, 1)\n"  # kwarg-only
        "    self._torch_npu.npu_fused_infer_attention_score(x, x, x, sparse_mode=3)\n"
    )
    _, problems = collect(source)
    assert len(problems) == 3
    assert "npu_rms_norm(2 positional, keywords ['eps'])" in problems[0]
    assert "npu_swiglu(3 positional" in problems[1]
    assert "npu_fused_infer_attention_score(4 positional" in problems[2]


def test_aliasing_getattr_and_imports_are_reported():
    source = (
        "import torch_npu\n"
        "def f(self):\n"
        "    tn = self._torch_npu\n"
        "    getattr(self._torch_npu, 'npu_rms_norm')\n"
        "    n = self._torch_npu.npu\n"
    )
    _, problems = collect(source)
    assert len(problems) == 4
    assert "imports torch_npu" in problems[0]
    assert all("used" in p for p in problems[1:])


def test_a_hand_off_to_an_outside_class_and_an_unlisted_c_name_are_caught():
    source = (
        "class X:\n"
        "    def f(self, t):\n"
        "        Ours(self._torch_npu)\n"
        "        Outside(self._torch_npu)\n"
        "        self._torch_npu._C._weak_ref_tensor(t)\n"
        "        self._torch_npu._C._made_up(t)\n"
    )
    refs, problems = collect(source, classes=frozenset({"Ours"}))
    assert [n for n, _ in refs] == ["_C._weak_ref_tensor", "_C._made_up"]
    assert problems == [
        "<src>:4: self._torch_npu used other than as `.attr` (aliased or passed on), which "
        "the check cannot follow",
        "<src>:6: torch_npu._C._made_up not listed",
    ]


def test_a_made_up_profiler_name_or_keyword_is_caught():
    source = (
        "class X:\n"
        "    def __init__(self, torch_npu):\n"
        "        self._torch_npu = torch_npu\n"
        "    def f(self):\n"
        "        self._torch_npu.profiler.profile(activities=[], with_modules=True)\n"
        "        self._torch_npu.profiler.profile(use_gzip=True)\n"
        "        self._torch_npu.profiler.not_an_api()\n"
    )
    refs, problems = collect(source)
    assert [n for n, _ in refs] == ["profiler.profile", "profiler.profile", "profiler.not_an_api"]
    assert len(problems) == 2
    assert "use_gzip" in problems[0] and "not_an_api" in problems[1]
