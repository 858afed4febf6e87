"""The probe must explain a host where `import torch` fails, so importing it loads no torch."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BLOCKER = ROOT / "tests" / "support" / "no_heavy_imports"


def python(code: str, blocked: bool) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if blocked:
        env["PYTHONPATH"] = str(BLOCKER)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT
    )


def test_importing_the_probe_does_not_load_torch():
    code = (
        "import sys, adapters.npu.probe, adapters.npu.loader\n"
        "heavy = sorted(m for m in ('torch', 'torch_npu', 'vllm') if m in sys.modules)\n"
        "print(heavy)"
    )
    done = python(code, blocked=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_probe_runs_where_torch_cannot_be_imported():
    # torch_npu installed without CANN: `import torch` fails, the probe says why.
    code = (
        "from adapters.npu.probe import NpuProbe\n"
        "from adapters.system.environment import OsEnvironment\n"
        "installed = lambda name: object()\n"
        "print(NpuProbe(OsEnvironment(), find_spec=installed).probe().reason)"
    )
    done = python(code, blocked=True)
    assert done.returncode == 0, done.stderr
    assert "CANN library libascendcl.so, libhccl.so not found" in done.stdout


def test_the_package_still_offers_its_classes_on_first_use():
    # In process: the package binds none of its classes, so each attribute goes through
    # its lazy __getattr__ (the unit tests have loaded torch already; the first test
    # above is the one that checks the package alone loads none).
    import adapters.npu as package

    assert not {"NpuRuntime", "NpuOps"} & set(vars(package))
    assert package.NpuRuntime.__name__ == "NpuRuntime"
    assert package.NpuOps.__name__ == "NpuOps"
