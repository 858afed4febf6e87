"""The embedding example runs where torch and vllm cannot be imported."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCKER = ROOT / "tests" / "support" / "no_heavy_imports"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(BLOCKER))
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=ROOT
    )


def test_the_blocker_really_blocks_torch_and_vllm():
    for name in ("torch", "vllm"):
        result = run("-c", f"import {name}")
        assert result.returncode != 0
        assert "blocked in this interpreter" in result.stderr


def test_example_validates_selects_and_detects_without_torch_or_vllm():
    result = run("examples/embed_core.py", "examples/model_w8a8")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Did you mean 'enable_kv_nz'" in out
    assert "attention on A2 (mla=False): standard" in out
    assert "attention on A3 (mla=True): mla" in out
    assert "quantization: ascend" in out
    assert "quant_model_description.json" in out


def test_example_refuses_a_directory_that_does_not_exist():
    result = run("examples/embed_core.py", "examples/no-such-model")
    assert result.returncode == 2
    assert "examples/no-such-model is not a directory" in result.stderr
    assert "quantization" not in result.stdout
