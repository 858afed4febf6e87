"""`ascend-doctor check` where `import torch` fails (torch_npu installed without CANN):
the container imports no device adapter, and the probe's own reason is reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BLOCKER = ROOT / "tests" / "support" / "no_heavy_imports"
CHILD = """
import json, sys
import sitecustomize
sitecustomize.BLOCKED = ("torch", "vllm")  # torch is broken; torch_npu's lookup still answers
from adapters.doctor.cli import main
code = main(["check", "--json"])
heavy = sorted(m for m in ("torch", "torch_npu", "vllm") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}))
"""


def test_check_reports_the_probe_reason_when_torch_cannot_be_imported(tmp_path: Path) -> None:
    # A torch_npu that can be found but not imported, as on a host without CANN.
    (tmp_path / "torch_npu").mkdir()
    (tmp_path / "torch_npu" / "__init__.py").write_text(
        "raise ImportError('libhccl.so: cannot open shared object file')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_ASCEND_", "ASCEND_"))}
    env.update(PYTHONPATH=f"{BLOCKER}:{tmp_path}", LD_LIBRARY_PATH="")
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    report_text, tail = done.stdout.rsplit("\n{", 1)
    result = json.loads("{" + tail)
    assert result == {"code": 2, "heavy": []}
    report = json.loads(report_text)
    device = next(i for s in report["sections"] for i in s["items"] if i["name"] == "device")
    assert "CANN library libascendcl.so, libhccl.so not found" in device["detail"]
    assert "the NPU probe failed" not in device["detail"]
    assert "set_env.sh" in device["fix"]
