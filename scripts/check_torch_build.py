"""Check after `make venv` that the torch build pip chose is the one this machine needs.

PyPI's plain `torch==X` on Linux x86_64 is the CUDA build (with about 3 GB of nvidia-*
packages); the host device and the NPU (torch-npu) need the CPU build, `torch==X+cpu`,
which only https://download.pytorch.org/whl/cpu or a local wheel provides. pip takes
the CPU build when one is reachable (a local version sorts above the plain one), so
this check tells which one it took, and fails with the fix when it is the wrong one.

Run: .venv/bin/python scripts/check_torch_build.py [--expect cpu|any]
"""

from __future__ import annotations

import argparse
import sys


def verdict(version: str, cuda: str | None, hip: str | None, expect: str) -> str | None:
    """None when the build is what `expect` asks for, else the message with the fix."""
    if expect == "any" or not (cuda or hip):
        return None
    build = f"CUDA {cuda}" if cuda else f"ROCm {hip}"
    return (
        f"torch {version} is the {build} build (PyPI's default on Linux), but this machine "
        "serves on the host device or an NPU, which need the CPU build (torch==X+cpu). "
        "Fix: `make clean-venv`, then `make venv "
        "TORCH_INDEX=https://download.pytorch.org/whl/cpu` where that index is reachable, "
        "or put the torch-X+cpu wheel in a directory and run `PIP_FIND_LINKS=<dir> make "
        "venv`; or keep this build with `make venv TORCH_BUILD=any` (it also runs on the "
        "host, about 3 GB larger)."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expect", choices=("cpu", "any"), default="cpu")
    args = parser.parse_args(argv)
    import torch

    message = verdict(torch.__version__, torch.version.cuda, torch.version.hip, args.expect)
    if message is not None:
        print(f"check_torch_build: {message}", file=sys.stderr)
        return 1
    print(f"check_torch_build: torch {torch.__version__} (CPU build)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
