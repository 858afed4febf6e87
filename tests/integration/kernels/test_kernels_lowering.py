"""`make kernels-check`: every kernel lowers to HIVM for an A2 and an A3 target, and a
kernel that overflows the unified buffer fails with bishengir-compile's own message.

The first run makes .cache/kernels-venv (triton-ascend, ascendnpu-ir, pybind11: about
40 s on this kind of machine with an empty pip cache); later runs reuse it.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TARGETS = ("Ascend910B3", "Ascend910_9391")
PLANTED = "tests/integration/kernels/planted_ub_overflow.py"


def kernels_check(*args: str) -> subprocess.CompletedProcess[str]:
    extra = [f"KERNELS_CHECK_ARGS={' '.join(args)}"] if args else []
    return subprocess.run(
        ["make", "-s", "--no-print-directory", "kernels-check", *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )


def case_names() -> list[str]:
    sys.path.insert(0, str(REPO))
    package = importlib.import_module("kernels.triton")
    return [
        case[0]
        for name in package.KERNEL_MODULES
        for case in importlib.import_module(name).LOWERING_CASES
    ]


@pytest.fixture(scope="module")
def kernels_run() -> subprocess.CompletedProcess[str]:
    return kernels_check()


def test_every_kernel_lowers_to_hivm_for_a2_and_a3(
    kernels_run: subprocess.CompletedProcess[str],
) -> None:
    out = kernels_run.stdout + kernels_run.stderr
    assert kernels_run.returncode == 0, out
    lines = out.splitlines()
    for name in case_names():
        for target in TARGETS:
            hits = [ln for ln in lines if f" {name} " in ln and f" {target} " in ln]
            assert len(hits) == 1, f"{name} on {target}: no single report line in\n{out}"
            assert hits[0].startswith("ok ") and "reached hivm" in hits[0], hits[0]


def test_a_unified_buffer_overflow_fails_with_the_compilers_message(
    kernels_run: subprocess.CompletedProcess[str],
) -> None:
    assert kernels_run.returncode == 0  # the venv is there; the planted run only lowers
    run = kernels_check("--cases", PLANTED)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    for target in TARGETS:
        assert any(
            ln.startswith("FAIL planted_ub_overflow") and target in ln for ln in out.splitlines()
        ), out
    assert "ub overflow, requires" in out
    assert "kernels-check: 0 lowered, 2 failed" in out
