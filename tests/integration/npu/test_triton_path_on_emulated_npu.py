"""LLM.generate on the emulated NPU through the Triton path (kernels/triton in Triton's
interpreter over the `npu` tensors, VLLM_ASCEND_TRITON_KERNELS=interpret) gives the torch
path's greedy ids.

One engine on the Triton path (triton_path_run.py, eager, llama tiny: greedy prompts with
a chunked prefill, then seeded top-k/top-p); its ids are compared with a host engine's,
which test_generate_on_emulated_npu.py shows equal to the NPU torch path's ids. Each
step's slot mapping runs through the kernel; the seeded top-k/top-p run through the
top-k/top-p kernel (the run reports each role's launches). The interpreter copies each
argument's storage to the host and back: this run's device counters are not an NPU's.
Nothing here runs on Ascend hardware.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from support.torch_npu_emulator.activate import child_env

RUNNER = Path(__file__).with_name("triton_path_run.py")
REPO = Path(__file__).resolve().parents[3]


def _start(device: str, model: str, env: dict[str, str]) -> subprocess.Popen[str]:
    env = dict(env, OMP_NUM_THREADS="1")
    env.pop("VLLM_ASCEND_DEVICE", None)
    return subprocess.Popen(
        [sys.executable, str(RUNNER), device, model],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def _finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=1800)  # the interpreter, on a shared machine
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, out[-4000:]
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


def test_the_triton_path_gives_the_torch_paths_greedy_ids(npu_model_dirs) -> None:
    model = npu_model_dirs["llama"]
    # The repository root: the `kernels` package beside src/ (an installed wheel ships it).
    triton_env = child_env(dict(os.environ, VLLM_ASCEND_TRITON_KERNELS="interpret"))
    triton_env["PYTHONPATH"] += os.pathsep + str(REPO)
    host = _start("host", model, dict(os.environ))
    npu = _start("npu", model, triton_env)
    want, got = _finish(host), _finish(npu)
    assert got["kernel_path"].startswith("interpreted (VLLM_ASCEND_TRITON_KERNELS=interpret")
    assert (got["platform"], got["device_type"]) == ("AscendNpuPlatform", "npu")
    # The kernels did the work: one slot mapping a step, top-k/top-p in the sampled steps.
    assert got["launches"]["slot_mapping"] > 0 and got["launches"]["topk_topp"] > 0
    assert got["runs"] == want["runs"], (got, want)  # greedy, a chunked prefill among them
    # Seeded top-k/top-p through the kernel draws the torch path's tokens.
    assert got["sampled"] == want["sampled"], (got, want)
