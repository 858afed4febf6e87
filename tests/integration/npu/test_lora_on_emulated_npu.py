"""LoRA on the NPU path (emulated torch_npu and `npu` device, bf16): a mixed batch whose
rows use adapter A, adapter B and none gives the host's ids (bf16, eager), eager and with
graphs captured; the adapters' weights live on the device and the NPU's LoRA ops serve.
An emulator, not Ascend hardware.
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


def _start(device: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.pop("VLLM_ASCEND_DEVICE", None)
    if device == "npu":
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
        "npu": _start("npu", *dirs),
        "npu-graphs": _start("npu", *dirs, "graphs"),
    }
    return read_all(procs, _result)


def test_npu_lora_gives_the_host_ids(runs) -> None:  # type: ignore[no-untyped-def]
    host, npu = runs["host"], runs["npu"]
    assert (host["platform"], host["lora_ops"]) == ("AscendHostPlatform", "TorchLoraOps")
    assert (npu["platform"], npu["lora_ops"]) == ("AscendNpuPlatform", "TorchLoraOps")
    assert npu["wrapper"] == host["wrapper"] == "AscendPunicaWrapper"
    assert npu["lora_weight_devices"] == ["npu"] and host["lora_weight_devices"] == ["cpu"]
    assert npu["lora_modules"] == host["lora_modules"] == MODULES
    assert npu["ids"] == host["ids"]
    # The adapters matter in bf16 too: each prompt's three rows are not all alike.
    per_prompt = [host["ids"][i : i + 3] for i in range(0, len(host["ids"]), 3)]
    assert all(len({tuple(ids) for ids in rows}) > 1 for rows in per_prompt)


def test_npu_lora_with_graphs_captured_gives_the_eager_ids(runs) -> None:  # type: ignore[no-untyped-def]
    graphs = runs["npu-graphs"]
    assert graphs["graph_mode"] != "NONE" and graphs["captured"] > 0
    assert graphs["ids"] == runs["npu"]["ids"]


def test_the_doctors_lora_slot_bytes_are_what_the_worker_allocated(runs) -> None:  # type: ignore[no-untyped-def]
    from adapters.system.model_files import LocalModelFiles
    from ascend_core.memory_budget import lora_slot_bytes

    base, _ = lora_model()
    headers = LocalModelFiles(str(base)).tensor_headers()
    estimate = lora_slot_bytes(headers, max_loras=2, max_lora_rank=8, dtype_bytes=2)
    assert estimate > 0 and runs["npu"]["lora_bytes"] == runs["host"]["lora_bytes"] == estimate
