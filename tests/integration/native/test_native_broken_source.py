"""One native source that fails to build costs only its own extension: the others build
and serve, and the fallback log names what fell back and the compiler's error.

In a child process (its ops would clash with this process's), over a copy of the
sources with greedy_argmax.cpp broken, into a fresh extensions directory: one failed
compile and one small real build (the KV write, ~8 s of CPU).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from adapters.cpu import native
from support.native_kernels import needs_compiler

CHILD = r"""
import json, logging, sys
from pathlib import Path
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="LOG %(message)s")
import torch
from adapters.cpu.native import EXTENSIONS, NativeKernels

# Two of the seven (all seven build at the first load; two keep the test cheap).
two = {name: EXTENSIONS[name] for name in ("greedy_argmax", "kv_write")}
kernels = NativeKernels(Path(sys.argv[1]), two)
broken = kernels.load("greedy_argmax")
kv_write = kernels.load("kv_write")
key = torch.randn(3, 2, 8)
caches = torch.zeros(2, 4, 2, 8), torch.zeros(2, 4, 2, 8)
slots = torch.tensor([5, -1, 0])
wrote = kv_write and torch.ops.ascend_host_native.write_kv_cache(key, key, *caches, slots)
print("RESULT " + json.dumps({
    "greedy_argmax": broken,
    "kv_write": kv_write,
    "wrote": bool(wrote) and torch.equal(caches[0][1, 1], key[0])
    and torch.equal(caches[1][0, 0], key[2]) and int(caches[0].count_nonzero()) == 32,
    "has_argmax": hasattr(torch.ops.ascend_host_native, "greedy_argmax"),
}))
"""


@needs_compiler
def test_a_broken_source_costs_only_its_own_kernel(tmp_path: Path) -> None:
    sources = tmp_path / "native"
    shutil.copytree(Path(native.__file__).parent, sources,
                    ignore=shutil.ignore_patterns("__pycache__", "*.py"))  # fmt: skip
    (sources / "greedy_argmax.cpp").write_text(
        "#include <torch/library.h>\nthis is not C++;\n"
    )
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(tmp_path / "ext"))
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(sources)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    lines = [line for line in child.stdout.splitlines() if line.startswith("RESULT ")]
    assert child.returncode == 0 and lines, child.stdout[-2000:] + child.stderr[-3000:]
    assert json.loads(lines[-1].removeprefix("RESULT ")) == {
        "greedy_argmax": False,
        "kv_write": True,
        "wrote": True,
        "has_argmax": False,
    }
    notes = [line for line in child.stderr.splitlines() if "unavailable" in line]
    assert len(notes) == 1, child.stderr[-3000:]
    assert notes[0].startswith("LOG Host native kernel greedy_argmax (greedy_argmax) unavailable")
    assert "greedy_argmax.cpp:2" in notes[0] and "error:" in notes[0]
    assert "greedy sampling through torch.argmax" in notes[0]
