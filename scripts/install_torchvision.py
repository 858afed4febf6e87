"""Install the torchvision that pairs with the installed torch, importable with a CPU torch.

vLLM's Qwen-VL and Qwen3.5 modules and transformers' vision processors import torchvision.
PyPI's Linux x86_64 torchvision wheels link CUDA torch (libc10_cuda, libtorch_cuda), so
against the CPU build their operator library `_C` does not load, and torchvision's import
then fails registering fake kernels for operators that do not exist. PyPI's aarch64 wheels
(what most Ascend hosts use, with torch-npu) are CPU builds and load as they are.

So: pip installs the paired wheel without dependencies (its only hard one is torch, already
here); if `import torchvision` fails because `_C` cannot load, `_C` is replaced by
scripts/torchvision_cpu/ops.cpp built against this torch: the operator schemas
torchvision's Python side registers against, no detection kernels (image processing is
plain torch). The wheel's own library is kept beside it as `_C.wheel.so`.

Run: .venv/bin/python scripts/install_torchvision.py   (make venv does)
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
OPS_SOURCE = HERE / "torchvision_cpu" / "ops.cpp"
CHECK = (
    "import torchvision, torch\n"
    "from torchvision.transforms.v2 import functional as F\n"
    "assert F.resize(torch.zeros(3, 8, 8), [4, 4]).shape == (3, 4, 4)\n"
    "print(torchvision.__version__)\n"
)


def paired_version(torch_version: str) -> str:
    """The torchvision release for a torch version ("2.13.0+cpu" -> "0.28.0")."""
    from ascend_core.preflight.versions import paired_torchvision

    paired = paired_torchvision(torch_version)
    if paired is None:
        raise SystemExit(
            f"install_torchvision: no torchvision pairing known for torch {torch_version}; "
            "add it to TORCHVISION_FOR_TORCH in src/ascend_core/preflight/versions.py "
            "(torchvision's compatibility table lists it)"
        )
    return paired


def _imports() -> tuple[bool, str]:
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True)
    return done.returncode == 0, (done.stdout + done.stderr).strip()


def _pip_install(version: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
         f"torchvision=={version}"],
        check=True,
    )


def _package_dir() -> pathlib.Path:
    site = pathlib.Path(sysconfig.get_paths()["purelib"])
    found = site / "torchvision"
    if not (found / "__init__.py").exists():
        raise SystemExit(f"install_torchvision: torchvision not found under {site}")
    return found


def build_ops_library(out: pathlib.Path) -> None:
    """Compile ops.cpp against the installed torch into `out` (a shared library)."""
    import torch
    from torch.utils import cpp_extension

    includes = [f"-I{p}" for p in cpp_extension.include_paths()]
    libs = cpp_extension.library_paths()
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        raise SystemExit("install_torchvision: no C++ compiler (apt-get install g++)")
    cmd = [
        cxx, "-shared", "-fPIC", "-O1", "-std=c++20", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        *includes, str(OPS_SOURCE), *[f"-L{p}" for p in libs],
        *[f"-Wl,-rpath,{p}" for p in libs], "-lc10", "-ltorch_cpu", "-ltorch", "-o", str(out),
    ]
    subprocess.run(cmd, check=True)


def replace_ops_library(package: pathlib.Path) -> None:
    (wheel_lib,) = package.glob("_C*.so")
    with tempfile.TemporaryDirectory() as tmp:
        built = pathlib.Path(tmp) / "_C.so"
        build_ops_library(built)
        kept = package / "_C.wheel.so"
        if not kept.exists():
            wheel_lib.rename(kept)
        shutil.copy2(built, package / wheel_lib.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    import torch

    version = paired_version(torch.__version__)
    ok, out = _imports()
    if not ok or not out.startswith(version):
        _pip_install(version)
        ok, out = _imports()
    if not ok:
        print("install_torchvision: the wheel's operator library does not load with torch "
              f"{torch.__version__}; building torchvision's operator schemas for it")
        replace_ops_library(_package_dir())
        ok, out = _imports()
    if not ok:
        print(f"install_torchvision: torchvision still does not import:\n{out}",
              file=sys.stderr)
        return 1
    print(f"install_torchvision: torchvision {out.splitlines()[-1]} imports with torch "
          f"{torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
