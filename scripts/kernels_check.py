"""Lower each Triton kernel of kernels/triton ahead of time for Ascend targets, up to HIVM.

Runs in the kernels venv (`make kernels-check` makes it: triton-ascend, ascendnpu-ir,
pybind11), never in the serving venv. Per kernel case and target it prints the furthest
stage reached: frontend (refused before any IR), ttir (Triton IR), linalg
(triton-adapter-opt), hivm (bishengir-compile's scheduled HIVM MLIR, after on-chip
buffer planning). The step after HIVM needs `hivmc`
from CANN; "Cannot find hivmc" is where this check ends on a machine without CANN, and
counts as a pass. Any other compiler error fails the check (exit 1) and is printed.

    python scripts/kernels_check.py [--cases FILE.py ...] [--targets A,B] [--keep DIR]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
# An A2 chip (Atlas 800T A2) and an A3 chip (Atlas A3), as bishengir-compile names them.
DEFAULT_TARGETS = ("Ascend910B3", "Ascend910_9391")
HIVMC_MISSING = "Cannot find hivmc"
# bishengir-compile's line when it has written HIVM and only the external hivmc is missing.
HIVMC_STEP_FAILED = "External hivmc run fails"


def _bishengir_on_path() -> None:
    """Put ascendnpu-ir's bishengir-compile on PATH, where triton-ascend looks for it."""
    spec = importlib.util.find_spec("ascendnpuir")
    if spec is None or not spec.submodule_search_locations:
        sys.exit(
            "kernels-check: the ascendnpu-ir package is not installed in this Python "
            f"({sys.executable}); run it through `make kernels-check`, which makes "
            ".cache/kernels-venv"
        )
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "bin"
    if not (bin_dir / "bishengir-compile").is_file():
        sys.exit(f"kernels-check: no bishengir-compile under {bin_dir}; reinstall ascendnpu-ir")
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


class _Arch:
    """Stands in for triton-ascend's NPUUtils, whose get_arch() builds against CANN."""

    arch = ""

    def get_arch(self) -> str:
        return _Arch.arch


class _SaveTemps:
    """subprocess for the backend: bishengir-compile runs also save their HIVM MLIR."""

    save_dir = ""

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    def run(self, cmd: Any, *args: Any, **kwargs: Any) -> Any:
        if (
            isinstance(cmd, list)
            and cmd
            and str(cmd[0]).endswith("bishengir-compile")
            and "--help" not in cmd
            and _SaveTemps.save_dir
        ):
            cmd = [*cmd, f"--save-temps={_SaveTemps.save_dir}"]
        return subprocess.run(cmd, *args, **kwargs)


def _ascend_backend() -> Any:
    from triton.backends import backends

    if "ascend" not in backends:
        sys.exit(
            "kernels-check: this triton has no Ascend backend (stock triton?); run it "
            "in the kernels venv through `make kernels-check`"
        )
    backend = backends["ascend"].compiler
    # The backend module is loaded from its file, outside sys.modules: patch its globals.
    stage_globals = backend.add_stages.__globals__
    stage_globals["NPUUtils"] = _Arch
    stage_globals["subprocess"] = _SaveTemps()
    add_stages = backend.add_stages

    def recording_stages(self: Any, stages: dict[str, Any], options: Any) -> None:
        add_stages(self, stages, options)
        for stage, run in list(stages.items()):
            stages[stage] = _recorded(stage, run)

    backend.add_stages = recording_stages
    return backend


# The backend's stage names, as this check reports them.
_STAGE_NAMES = {"ttir": "ttir", "ttadapter": "linalg", "npubin": "npubin"}
_done: list[str] = []


def _recorded(stage: str, run: Any) -> Any:
    def stage_run(src: Any, metadata: Any) -> Any:
        out = run(src, metadata)
        _done.append(_STAGE_NAMES.get(stage, stage))
        return out

    return stage_run


def _load_cases(sources: list[str]) -> list[tuple[str, Any, dict[str, str], dict[str, Any]]]:
    sys.path.insert(0, str(REPO))
    modules: list[ModuleType] = []
    if not sources:
        package = importlib.import_module("kernels.triton")
        modules = [importlib.import_module(name) for name in package.KERNEL_MODULES]
    for source in sources:
        path = Path(source).resolve()
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            sys.exit(f"kernels-check: cannot load cases from {source}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules.append(module)
    cases = []
    for module in modules:
        found = getattr(module, "LOWERING_CASES", None)
        if not found:
            sys.exit(f"kernels-check: {module.__name__} lists no LOWERING_CASES")
        cases.extend(found)
    return cases


def _lower(
    case: tuple[str, Any, dict[str, str], dict[str, Any]], arch: str, keep: Path | None
) -> tuple[str, str, bool]:
    """(furthest stage, error text, passed) for one case on one target."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    name, kernel, signature, constants = case
    _Arch.arch = arch
    with tempfile.TemporaryDirectory() as tmp:
        _SaveTemps.save_dir = tmp
        source = ASTSource(fn=kernel, signature=signature, constants=constants)
        _done.clear()
        error = ""
        try:
            triton.compile(source, target=GPUTarget("npu", arch, 0))
        except Exception as exc:  # the compiler's own error, reported as is
            error = str(exc) or repr(exc)
        hivm = sorted(Path(tmp).glob("*.hivm*.mlir"))
        reached = _done[-1] if _done else "frontend"  # refused before Triton IR
        if reached == "linalg" and hivm:
            reached = "hivm"  # bishengir-compile wrote it, then stopped before hivmc
        if keep is not None and hivm:
            out = keep / arch / f"{_slug(name)}.hivm.mlir"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(hivm[-1].read_text())
    passed = reached == "npubin" or (
        reached == "hivm" and HIVMC_MISSING in error and HIVMC_STEP_FAILED in error
    )
    return reached, error, passed


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")


def _compiler_lines(error: str) -> str:
    """The compiler's message without triton's banner lines."""
    keep = [
        line
        for line in error.splitlines()
        if line.strip() and "[Triton][" not in line and "compiled kernel cache" not in line
    ]
    return "\n".join("      " + line for line in keep[-12:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="*", default=[], help="files with LOWERING_CASES")
    parser.add_argument("--targets", default=",".join(DEFAULT_TARGETS))
    parser.add_argument("--keep", type=Path, help="write each HIVM MLIR under this folder")
    args = parser.parse_args(argv)

    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="kernels-check-cache-"))
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"
    _bishengir_on_path()
    _ascend_backend()
    cases = _load_cases(args.cases)
    targets = [t for t in args.targets.split(",") if t]

    failures = 0
    for case in cases:
        for arch in targets:
            start = time.monotonic()
            reached, error, passed = _lower(case, arch, args.keep)
            seconds = time.monotonic() - start
            verdict = "ok" if passed else "FAIL"
            note = f" (then: {HIVMC_MISSING}, CANN absent)" if passed and reached == "hivm" else ""
            print(f"{verdict:4} {case[0]:32} {arch:15} reached {reached}{note} [{seconds:.1f}s]")
            if not passed:
                failures += 1
                print(_compiler_lines(error) or "      (no compiler message)")
    print(f"kernels-check: {len(cases) * len(targets) - failures} lowered, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
