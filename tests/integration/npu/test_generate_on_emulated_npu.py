"""LLM.generate through the plugin's NPU path on the emulated torch_npu gives the host's ids.

Each run is a fresh process (generate_run.py), since vLLM fixes its platform once per
process: one on the host device, one with the emulated torch_npu injected into the NPU
wiring, so that vLLM activates AscendNpuPlatform, which builds NpuWorker with NpuRuntime
and NpuModelRunner (vLLM's GPU runner) and computes through NpuOps, every torch_npu call
bound against the torch_npu 2.14.0 schemas and executed with the host's reference
semantics. Weights, KV cache and activations are tensors of the emulated `npu` device
(host memory underneath), where an op mixing devices fails: this is an emulator, not
Ascend hardware.

bf16 (the NPU attention op takes no float32 query) and block size 128 (its paged
prefill needs a multiple of 128). Prompts longer than max_num_batched_tokens run as
chunked prefill; the second pass over the same prompts hits the prefix cache. The K and
V caches reach the attention op as allocated (it refuses non-contiguous caches), so the
KV layout needs no copy.
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

RUNNER = Path(__file__).with_name("generate_run.py")
STYLES = ("llama", "qwen3")


def _start(device: str, model: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("VLLM_ASCEND_DEVICE", None)
    if device == "npu":
        # Every Python process vLLM starts must see the emulated NPU too (a cold
        # model-info cache makes vLLM inspect the model in a subprocess).
        env = child_env(env)
    env["OMP_NUM_THREADS"] = "1"  # the runs go side by side on a small machine
    return subprocess.Popen(
        [sys.executable, str(RUNNER), device, model, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=600)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, out[-4000:]
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


@pytest.fixture(scope="module")
def runs(npu_model_dirs: dict[str, str]) -> dict[tuple[str, str], dict[str, Any]]:
    procs = {
        (device, style): _start(device, npu_model_dirs[style])
        for style in STYLES
        for device in ("host", "npu")
    }
    return {key: _result(proc) for key, proc in procs.items()}


@pytest.mark.parametrize("style", STYLES)
def test_npu_path_gives_the_host_token_ids(runs, style: str) -> None:
    host, npu = runs["host", style], runs["npu", style]
    assert (host["platform"], host["worker"], host["ops"]) == (
        "AscendHostPlatform",
        "HostWorker",
        "CpuOps",
    )
    assert (npu["platform"], npu["worker"], npu["ops"], npu["device_type"]) == (
        "AscendNpuPlatform",
        "NpuWorker",
        "NpuOps",
        "npu",
    )
    # vLLM's default async scheduling: the sampled ids come back on the runner's copy
    # stream, with its events (the host device runs one step at a time).
    assert npu["async_scheduling"] and not host["async_scheduling"]
    # Weights and KV cache live on the device (no mixed-device op: the run would fail).
    assert npu["devices"] == {"parameters": ["npu"], "kv_caches": ["npu"]}
    assert host["devices"] == {"parameters": ["cpu"], "kv_caches": ["cpu"]}
    first, again = npu["runs"]
    assert first == host["runs"][0]
    assert again == host["runs"][1] == first
    # Seeded top-k/top-p sampling draws the same tokens (CPU generators on both devices).
    assert npu["sampled"] == host["sampled"] and len(npu["sampled"]) == 3
    # Every prompt of at least one full block found it cached on the second pass.
    assert npu["cached_tokens"] == [0, 128, 0, 128, 0, 128, 0, 256] == host["cached_tokens"]


@pytest.mark.parametrize("style", STYLES)
def test_npu_decode_step_reads_back_only_the_sampled_ids(runs, style: str) -> None:
    step = runs["npu", style]["decode_step"]
    # One device-to-host copy (the sampled ids), no scalar read, no data-dependent shape.
    assert (step["d2h_copies"], step["scalar_reads"], step["dynamic_shape_ops"]) == (1, 0, 0)


@pytest.mark.parametrize("style", STYLES)
def test_npu_path_ran_every_op_through_torch_npu(runs, style: str) -> None:
    npu = runs["npu", style]
    assert set(npu["calls"]) == {
        "npu_rms_norm",
        "npu_add_rms_norm",
        "npu_swiglu",
        "npu_mrope",
        "npu_scatter_pa_kv_cache",
        "npu_fused_infer_attention_score",
    }
    assert npu["sparse_modes"] == [0, 3]  # decode batches and (chunked) prefill batches
