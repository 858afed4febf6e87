"""LoRA on the NPU path (emulated torch_npu and `npu` device, bf16): a mixed batch whose
rows use adapter A, adapter B and none gives the host's ids (bf16, eager), with the
plan's graphs captured, on both of vLLM's runners: V1 (the plugin's default) and V2
(VLLM_USE_V2_MODEL_RUNNER=1, what vLLM picks by itself on an NPU host: the worker builds
NpuModelRunnerV2, its FULL decode graphs captured for each of V2's active-adapter counts
and sampling from the logits they record, the LM head's adapter in them). The adapters'
weights live on the device and the NPU's LoRA ops serve. An emulator, not Ascend hardware.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.child_runs import last_result, read_all
from support.lora_reference import lora_model
from support.torch_npu_emulator.activate import child_env

RUNNER = Path(__file__).with_name("lora_run.py")
MODULES = ["down_proj", "embed_tokens", "gate_up_proj", "lm_head", "o_proj", "qkv_proj"]


def _start(device: str, *args: str, v2: bool = False) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("VLLM_ASCEND_DEVICE", None)
    env.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    if v2:
        # As test_v2_runner_on_emulated_npu.py: triton-ascend's driver presented as active
        # (an NPU host's), V2's Triton kernels in Triton's interpreter, the plugin's own
        # kernels on their torch path (the emulated triton-ascend has no compiler).
        env = child_env(dict(env, VLLM_USE_V2_MODEL_RUNNER="1", TRITON_INTERPRET="1"),
                        triton_driver=True)  # fmt: skip
        env["VLLM_ASCEND_TRITON_KERNELS"] = "off"
    elif device == "npu":
        env = child_env(env)
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.Popen(
        [sys.executable, str(RUNNER), device, *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    return last_result(proc)


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    base, adapters = lora_model()
    dirs = [str(base), str(adapters["lora-a"]), str(adapters["lora-b"])]
    procs = {
        "host": _start("host", *dirs),
        "npu": _start("npu", *dirs, "graphs"),
        "npu-v2": _start("npu", *dirs, "graphs", v2=True),
    }
    return read_all(procs, _result)


def _adapters_matter(ids: list[list[int]]) -> bool:
    """Each prompt's three rows (none, A, B) are not all alike."""
    per_prompt = [ids[i : i + 3] for i in range(0, len(ids), 3)]
    return all(len({tuple(row) for row in rows}) > 1 for rows in per_prompt)


def test_npu_lora_with_graphs_captured_gives_the_host_ids(runs) -> None:  # type: ignore[no-untyped-def]
    host, npu = runs["host"], runs["npu"]
    assert (host["platform"], host["lora_ops"]) == ("AscendHostPlatform", "TorchLoraOps")
    assert (npu["platform"], npu["lora_ops"]) == ("AscendNpuPlatform", "TorchLoraOps")
    assert npu["wrapper"] == host["wrapper"] == "AscendPunicaWrapper"
    assert npu["lora_weight_devices"] == ["npu"] and host["lora_weight_devices"] == ["cpu"]
    assert npu["lora_modules"] == host["lora_modules"] == MODULES
    assert npu["runner"] == "NpuModelRunner" and npu["engine_v2"] is False
    assert npu["graph_mode"] != "NONE" and npu["captured"] > 0
    assert npu["ids"] == host["ids"]
    # The adapters matter in bf16 too.
    assert _adapters_matter(host["ids"])


def test_npu_lora_on_the_v2_runner_gives_the_host_ids(runs) -> None:  # type: ignore[no-untyped-def]
    host, v2 = runs["host"], runs["npu-v2"]
    assert v2["runner"] == "NpuModelRunnerV2" and v2["engine_v2"] is True
    assert "vllm.v1.worker.gpu.model_runner.GPUModelRunner" in v2["mro"]
    assert "vllm.v1.worker.gpu_model_runner.GPUModelRunner" not in v2["mro"]  # not V1
    assert (v2["platform"], v2["wrapper"], v2["lora_ops"]) == (
        "AscendNpuPlatform", "AscendPunicaWrapper", "TorchLoraOps"
    )
    assert v2["lora_weight_devices"] == ["npu"] and v2["lora_modules"] == MODULES
    # The plan's graphs: V2's FULL decode graphs for each of its active-adapter counts
    # (none, and max_loras + 1: adapters and rows without one), and decode steps of the
    # mixed batch sampled from the logits a replay recorded (the LM head's adapter in it).
    assert v2["graph_mode"] == "FULL_AND_PIECEWISE" and v2["captured"] > 0
    assert v2["lora_capture_cases"] == v2["full_graph_lora_counts"] == [0, 3]
    assert v2["graph_logits_steps"] > 0
    assert v2["ids"] == host["ids"]
    assert _adapters_matter(v2["ids"])


def test_the_doctors_lora_slot_bytes_are_what_the_worker_allocated(runs) -> None:  # type: ignore[no-untyped-def]
    from adapters.system.model_files import LocalModelFiles
    from ascend_core.memory_budget import lora_slot_bytes

    base, _ = lora_model()
    headers = LocalModelFiles(str(base)).tensor_headers()
    estimate = lora_slot_bytes(headers, max_loras=2, max_lora_rank=8, dtype_bytes=2)
    allocated = {runs[run]["lora_bytes"] for run in ("host", "npu", "npu-v2")}
    assert estimate > 0 and allocated == {estimate}
