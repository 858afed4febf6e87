"""A wheel built from the tree carries what the native kernels' build needs (and the
NPU's Triton kernels, kernels/triton): installed with pip into a fresh venv, its sources
compile an extension that includes the headers (with the loader the accessors use), and
the kernel gives the torch reference's answer. (tests/unit/cpu/test_cpu_native_build.py
checks every included file ships.)

Compiles one extension (decode attention, ~10 s of CPU) into a fresh extensions
directory; the wheel is built without isolation from the venv's setuptools, offline. The
fresh venv installs only the wheel (--no-deps, offline): torch and the rest come from this
venv's site-packages, named as a plain path so its editable install of the tree stays off.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

from support.native_kernels import needs_compiler

REPO = Path(__file__).resolve().parents[3]

CHILD = r"""
import json, logging, math, sys
from pathlib import Path
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
import torch
import adapters
from adapters.cpu import native

# The accessors build all seven extensions at their first call (82 s of CPU); the same
# loader over the installed sources, for the one extension this checks, keeps it cheap.
attention = {"attention": native.EXTENSIONS["attention"]}
kernels = native.NativeKernels(Path(native.__file__).parent, attention)
kernel = torch.ops.ascend_host_native.decode_attention if kernels.load("attention") else None
torch.manual_seed(0)
B, Hq, Hk, D, bs, blocks = 2, 4, 2, 16, 4, 6
query = torch.randn(B, Hq, D)
kc, vc = torch.randn(blocks, bs, Hk, D), torch.randn(blocks, bs, Hk, D)
table = torch.tensor([[0, 2, 4], [1, 3, 5]])
lens = torch.tensor([9, 5])
scale = 1 / math.sqrt(D)
out = torch.full_like(query, 7.0)
if kernel is not None:
    kernel(out, query, kc, vc, table, lens, scale)
ref = torch.empty_like(query)
for b in range(B):
    n = int(lens[b])
    k = kc[table[b]].reshape(-1, Hk, D)[:n]
    v = vc[table[b]].reshape(-1, Hk, D)[:n]
    for h in range(Hq):
        g = h // (Hq // Hk)
        ref[b, h] = ((query[b, h] @ k[:, g].T) * scale).softmax(-1) @ v[:, g]
print("RESULT " + json.dumps({
    "adapters": adapters.__file__,
    "native": native.__file__,
    "built": kernel is not None,
    "max_error": float((out - ref).abs().max()),
}))
"""


@needs_compiler
def test_a_wheel_install_builds_and_uses_the_native_kernels(tmp_path: Path) -> None:
    tree = tmp_path / "tree"  # a copy: the build writes build/ and egg-info next to it
    for part in ("src", "kernels"):  # kernels/: the NPU's Triton kernels, beside src/
        shutil.copytree(
            REPO / part, tree / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
        )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, tree / name)
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "-q", "-w", str(dist), str(tree)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "adapters/cpu/native/dot_kernels.h" in names, names
    # The NPU sleep pool's allocator source, built on NPU hosts (adapters/npu/vmm_pool.py).
    assert "adapters/npu/native/vmm_pool.cpp" in names, names
    # The Triton kernels adapters/npu launches, each module the lowering check lists.
    kernel_modules = {n for n in names if n.startswith("kernels/triton/")}
    assert {f"kernels/triton/{m}.py" for m in ("slot_mapping", "topk_topp", "rejection")} < (
        kernel_modules
    ), names

    fresh = tmp_path / "venv"
    made = subprocess.run(
        [sys.executable, "-m", "venv", str(fresh)], capture_output=True, text=True, timeout=120
    )
    assert made.returncode == 0, made.stderr[-3000:]
    python = fresh / "bin" / "python"
    site_dir = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    # torch and the rest from this venv; a plain path line, so its .pth files (the
    # editable install of the tree among them) are not read.
    (site_dir / "serving_venv.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    installed = subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TORCH_EXTENSIONS_DIR"] = str(tmp_path / "ext")
    child = subprocess.run(
        [python, "-c", CHILD],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    lines = [line for line in child.stdout.splitlines() if line.startswith("RESULT ")]
    assert child.returncode == 0 and lines, child.stdout[-2000:] + child.stderr[-3000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert Path(result["adapters"]).is_relative_to(site_dir)
    assert Path(result["native"]).is_relative_to(site_dir)
    assert result["built"], child.stderr[-3000:]
    assert result["max_error"] < 1e-5
    assert "Compiling the host's native kernels" in child.stderr  # a real, cold build
    assert any((tmp_path / "ext").rglob("vllm_ascend_host_attention_*.so"))
