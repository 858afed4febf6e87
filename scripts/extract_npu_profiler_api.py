"""Extract torch_npu.profiler's public signatures, for the emulated profiler's check.

Reads a torch_npu wheel as a zip file (never installed) and writes
tests/support/torch_npu_emulator/profiler_api_<version>.json: the parameters (name,
keyword-only or not, default as source text) of profile, tensorboard_trace_handler,
schedule (Schedule) and _ExperimentalConfig, the option constants of ProfilerLevel,
AiCMetrics and ExportType, and torch_npu.profiler's __all__.

    pip download --no-deps torch-npu==2.14.0 -d /tmp/torchnpu
    .venv/bin/python scripts/extract_npu_profiler_api.py /tmp/torchnpu/torch_npu-2.14.0-*.whl
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import zipfile
from pathlib import Path
from typing import Any

PACKAGE = "torch_npu/profiler/"
# public name -> (file, class or None, function)
CALLABLES = {
    "profile": ("profiler.py", "profile", "__init__"),
    "tensorboard_trace_handler": ("profiler.py", None, "tensorboard_trace_handler"),
    "schedule": ("scheduler.py", "Schedule", "__init__"),
    "_ExperimentalConfig": ("experimental_config.py", "_ExperimentalConfig", "__init__"),
}
OPTION_CLASSES = ("ProfilerLevel", "AiCMetrics", "ExportType")
CONSTANTS = "analysis/prof_common_func/_constant.py"
OUT = Path(__file__).resolve().parents[1] / "tests/support/torch_npu_emulator"


def _function(tree: ast.Module, cls: str | None, name: str) -> ast.FunctionDef:
    scope: list[ast.stmt] = tree.body
    if cls is not None:
        scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    return next(n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name)


def _parameters(fn: ast.FunctionDef) -> list[dict[str, Any]]:
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults))
    defaults += list(a.defaults)
    out = [
        {"name": p.arg, "keyword_only": False, "default": ast.unparse(d) if d else None}
        for p, d in zip(positional, defaults, strict=True)
        if p.arg != "self"
    ]
    out += [
        {"name": p.arg, "keyword_only": True, "default": ast.unparse(d) if d else None}
        for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)
    ]
    return out


def _constants(source: str) -> dict[str, str]:
    return dict(re.findall(r"^\s+(\w+) = \"([^\"]*)\"", source, flags=re.M))


def _options(tree: ast.Module, constants: dict[str, str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in OPTION_CLASSES:
            out[node.name] = {
                t.id: constants[s.value.attr]
                for s in node.body
                if isinstance(s, ast.Assign) and isinstance(s.value, ast.Attribute)
                for t in s.targets
                if isinstance(t, ast.Name)
            }
    return out


def extract(wheel: Path) -> dict[str, Any]:
    with zipfile.ZipFile(wheel) as z:
        read = lambda name: z.read(PACKAGE + name).decode()  # noqa: E731
        trees = {f: ast.parse(read(f)) for f, _, _ in CALLABLES.values()}
        init = ast.parse(read("__init__.py"))
        constants = _constants(read(CONSTANTS))
        version = re.search(r"torch_npu-([^-]+)-", wheel.name)
    all_names = next(
        ast.literal_eval(n.value)
        for n in init.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in n.targets)
    )
    return {
        "provenance": {
            "wheel": wheel.name,
            "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
            "torch_npu_version": version.group(1) if version else "unknown",
            "sources": "torch_npu/profiler/{__init__,profiler,scheduler,experimental_config}.py, "
            + CONSTANTS,
        },
        "all": sorted(all_names),
        "callables": {
            public: _parameters(_function(trees[f], cls, fn))
            for public, (f, cls, fn) in CALLABLES.items()
        },
        "options": _options(trees["experimental_config.py"], constants),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("wheel", type=Path)
    args = parser.parse_args()
    data = extract(args.wheel)
    out = OUT / f"profiler_api_{data['provenance']['torch_npu_version']}.json"
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(out)


if __name__ == "__main__":
    main()
