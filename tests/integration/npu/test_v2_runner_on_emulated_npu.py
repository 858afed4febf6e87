"""The NPU worker on vLLM's Model Runner V2 (VLLM_USE_V2_MODEL_RUNNER=1) on the emulated
NPU gives the host device's greedy ids, and its runner derives from vLLM's V2 runner.

One engine on each device (v2_runner_run.py, llama tiny, eager): batch 8 of mixed lengths
(three longer than a step: chunked prefill), then the same batch again (a prefix-cache
pass). The NPU's: triton-ascend's driver presented as active (as on an NPU host) and
V2's Triton kernels in Triton's interpreter (TRITON_INTERPRET=1; the emulated
triton-ascend has no compiler), each launch recorded and found in the core's V2 kernels
table, whose `exercised` kernels are the ones launched. The host's: its own runner (V1; the host
builds no V2), the reference ids.
Nothing here runs on Ascend hardware.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.torch_npu_emulator.activate import child_env

RUNNER = Path(__file__).with_name("v2_runner_run.py")


def _start(device: str, model: str, env: dict[str, str]) -> subprocess.Popen[str]:
    env = dict(env, OMP_NUM_THREADS="1")
    env.pop("VLLM_ASCEND_DEVICE", None)
    return subprocess.Popen(
        [sys.executable, str(RUNNER), device, model],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )


def _finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=1800)  # the interpreter, on a shared machine
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, out[-6000:]
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    result["log"] = out
    return result


@pytest.fixture(scope="module")
def runs(npu_model_dirs: dict[str, str]) -> dict[str, dict[str, Any]]:
    model = npu_model_dirs["llama"]
    base = {k: v for k, v in os.environ.items() if k != "VLLM_USE_V2_MODEL_RUNNER"}
    npu_env = child_env(dict(base, VLLM_USE_V2_MODEL_RUNNER="1", TRITON_INTERPRET="1"),
                        triton_driver=True)
    npu_env["VLLM_ASCEND_TRITON_KERNELS"] = "off"  # the plugin's own kernels: torch path
    npu = _start("npu", model, npu_env)
    host = _start("host", model, base)
    return {"npu": _finish(npu), "host": _finish(host)}


def test_the_npu_worker_builds_a_runner_deriving_from_vllms_v2_runner(runs) -> None:
    npu = runs["npu"]
    assert npu["runner"] == "NpuModelRunnerV2" and npu["engine_v2"] is True
    assert "vllm.v1.worker.gpu.model_runner.GPUModelRunner" in npu["mro"]
    assert "vllm.v1.worker.gpu_model_runner.GPUModelRunner" not in npu["mro"]  # not V1
    said = "VLLM_USE_V2_MODEL_RUNNER=1 asked for vLLM's V2 runner: the NPU worker builds it"
    assert said in npu["log"]
    assert runs["host"]["engine_v2"] is False  # the host's reference runs V1


def test_v2_on_the_emulated_npu_gives_the_host_devices_ids(runs) -> None:
    npu, host = runs["npu"], runs["host"]
    assert npu["runs"][0] == host["runs"][0]  # batch 8, mixed lengths, chunked prefill
    # The second pass found the long prompts' full blocks (128 tokens) in the prefix cache.
    assert npu["cached_tokens"] == host["cached_tokens"]
    assert sum(npu["cached_tokens"]) >= 3 * 128
    assert npu["runs"][1] == host["runs"][1] == host["runs"][0]


def test_every_v2_kernel_launched_is_in_the_kernels_table(runs) -> None:
    from ascend_core.v2_kernels import KERNELS

    table = {f"{k.module}.{k.name}": k for k in KERNELS}
    launched = runs["npu"]["launches"]
    print("V2 kernels launched (launches, seconds):", json.dumps(launched, sort_keys=True))
    assert launched, "no Triton kernel ran: was TRITON_INTERPRET=1 set before Triton?"
    assert set(launched) <= set(table), set(launched) - set(table)
    # The table's `exercised` kernels are the ones this run launches.
    exercised = {name for name, k in table.items() if k.exercised}
    assert exercised == set(launched), (exercised - set(launched), set(launched) - exercised)
