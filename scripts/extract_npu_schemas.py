"""Extract the torch_npu op schemas and Python API names the NPU adapter is checked against.

Reads a torch_npu wheel as a zip file (it is never installed: without CANN it breaks
`import torch`) and writes src/adapters/npu/schemas/torch_npu_<version>.json.

    pip download --no-deps torch-npu==2.14.0 -d /tmp/torchnpu
    .venv/bin/python scripts/extract_npu_schemas.py /tmp/torchnpu/torch_npu-2.14.0-*.whl
"""

from __future__ import annotations

import argparse
import ast
import datetime
import hashlib
import json
import posixpath
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

import yaml
from torchgen.model import Argument, FunctionSchema

YAML_PATH = "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"
NPU_PACKAGE = "torch_npu/npu/__init__.py"
ATB_HEADER = "torch_npu/include/third_party/op-plugin/op_plugin/include/AtbOpsInterface.h"
# The YAML section whose ops torch_npu registers under torch.ops.npu and re-exports as
# torch_npu.<name>; the other sections hold aten ops with NPU kernels.
NPU_NAMESPACE_SECTION = "custom"
OUT_DIR = Path(__file__).resolve().parent.parent / "src" / "adapters" / "npu" / "schemas"


def _default_value(text: str | None) -> Any:
    """The Python value of a schema default where it is a literal; the raw text otherwise."""
    if text is None:
        return None
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _argument(arg: Argument, kwarg_only: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": arg.name,
        "type": str(arg.type),
        "kwarg_only": kwarg_only,
        "has_default": arg.default is not None,
    }
    if arg.default is not None:
        entry["default"] = _default_value(arg.default)
    if arg.annotation is not None and arg.annotation.is_write:
        entry["mutable"] = True
    return entry


def parse_ops(yaml_text: str) -> dict[str, list[dict[str, Any]]]:
    """Every npu-namespace op, by the name torch_npu exposes, with its overloads."""
    data = yaml.safe_load(yaml_text)
    ops: dict[str, list[dict[str, Any]]] = {}
    seen: set[str] = set()
    for entry in data[NPU_NAMESPACE_SECTION]:
        if not isinstance(entry, dict) or "func" not in entry:
            continue
        schema = FunctionSchema.parse(entry["func"])
        full = str(schema.name)
        if full in seen:
            continue
        seen.add(full)
        args = [_argument(a, False) for a in schema.arguments.flat_positional]
        args += [_argument(a, True) for a in schema.arguments.flat_kwarg_only]
        args += [_argument(a, True) for a in schema.arguments.out]
        ops.setdefault(str(schema.name.name), []).append(
            {
                "overload": schema.name.overload_name,
                "schema": entry["func"],
                "arguments": args,
                "returns": [str(r.type) for r in schema.returns],
            }
        )
    return ops


def _module_path(package_file: str, relative: str, level: int) -> str:
    base = posixpath.dirname(package_file)
    for _ in range(level - 1):
        base = posixpath.dirname(base)
    return posixpath.join(base, *relative.split(".")) if relative else base


def _read_source(wheel: zipfile.ZipFile, module_path: str) -> str | None:
    for candidate in (module_path + ".py", module_path + "/__init__.py"):
        if candidate in wheel.namelist():
            return wheel.read(candidate).decode("utf-8")
    return None


def _exported_names(wheel: zipfile.ZipFile, path: str) -> set[str]:
    """Public names a module file binds at top level; `from .x import *` is followed."""
    tree = ast.parse(wheel.read(path).decode("utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names.add(target.id)
                    if target.id == "__all__" and isinstance(node.value, (ast.List, ast.Tuple)):
                        names.update(
                            e.value for e in node.value.elts if isinstance(e, ast.Constant)
                        )
        elif isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name != "*":
                    names.add(alias.asname or alias.name)
                    continue
                if not node.level:
                    continue
                target = _module_path(path, node.module or "", node.level)
                for suffix in (".py", "/__init__.py"):
                    if target + suffix in wheel.namelist():
                        names |= _star_names(wheel, target + suffix)
                        break
    return {n for n in names if not n.startswith("_")}


def _star_names(wheel: zipfile.ZipFile, path: str) -> set[str]:
    """What `from module import *` binds: __all__ when the module has one."""
    tree = ast.parse(wheel.read(path).decode("utf-8"))
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            and isinstance(node.value, (ast.List, ast.Tuple))
        ):
            return {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return _exported_names(wheel, path)


def parse_atb_signatures(header: str) -> dict[str, str]:
    """C++ declarations of the ATB ops (`_npu_*`), which have no YAML entry."""
    found: dict[str, str] = {}
    for match in re.finditer(r"^[^\n;]*?\b(_npu_\w+)\s*\(([^;{]*)\)\s*;", header, re.M):
        found[match.group(1)] = " ".join(match.group(0).split())
    return found


def extract(wheel_path: Path) -> dict[str, Any]:
    digest = hashlib.sha256(wheel_path.read_bytes()).hexdigest()
    with zipfile.ZipFile(wheel_path) as wheel:
        ops = parse_ops(wheel.read(YAML_PATH).decode("utf-8"))
        npu_api = sorted(_exported_names(wheel, NPU_PACKAGE))
        atb = (
            parse_atb_signatures(wheel.read(ATB_HEADER).decode("utf-8"))
            if ATB_HEADER in wheel.namelist()
            else {}
        )
        version_src = wheel.read("torch_npu/version.py").decode("utf-8")
    version = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", version_src)
    return {
        "provenance": {
            "wheel": wheel_path.name,
            "sha256": digest,
            "torch_npu_version": version.group(1) if version else "",
            "extracted_on": datetime.date.today().isoformat(),
            "command": (
                "pip download --no-deps torch-npu==2.14.0 -d /tmp/torchnpu && "
                f".venv/bin/python scripts/extract_npu_schemas.py /tmp/torchnpu/{wheel_path.name}"
            ),
            "sources": {
                "ops": f"{YAML_PATH} (section '{NPU_NAMESPACE_SECTION}', parsed by torchgen)",
                "python_api": f"{NPU_PACKAGE} (top-level names, star imports followed, by ast)",
                "atb_ops": ATB_HEADER,
            },
        },
        "ops": ops,
        "python_api": {"torch_npu.npu": npu_api},
        "atb_ops": atb,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path, help="a downloaded torch_npu wheel")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    data = extract(args.wheel)
    version = data["provenance"]["torch_npu_version"].split("+")[0] or "unknown"
    out = args.out_dir / f"torch_npu_{version}.json"
    out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(
        f"{out}: {len(data['ops'])} ops, {len(data['python_api']['torch_npu.npu'])} "
        f"torch_npu.npu names, {len(data['atb_ops'])} ATB signatures"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
