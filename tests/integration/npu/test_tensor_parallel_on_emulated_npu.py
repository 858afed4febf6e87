"""TP=2 on two emulated NPUs gives the TP=1 greedy ids (generate_run.py, fresh processes).

Each rank runs NpuWorker/NpuModelRunner on its own emulated device (npu:0, npu:1). The
emulated NPU has no HCCL, so the device group is gloo and NpuDeviceCommunicator moves
each collective through host memory. float16: with bfloat16 each rank rounds its partial
sums to 7 mantissa bits before the all-reduce, and on this random-weight model one of the
8 sequences then picks a different near-tied token at its second step (seen here); with
float16's 10 bits the ids agree. An emulator, not Ascend hardware.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_generate_on_emulated_npu import _result

from support.child_runs import read_all
from support.torch_npu_emulator.activate import child_env

RUNNER = Path(__file__).with_name("generate_run.py")


def _start(model: str, tp: int) -> subprocess.Popen[str]:
    env = child_env(dict(os.environ), device_count=2)
    env.pop("VLLM_ASCEND_DEVICE", None)
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.Popen(
        [sys.executable, str(RUNNER), "npu", model, str(tp), "float16"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


@pytest.fixture(scope="module")
def runs(npu_model_dirs: dict[str, str]) -> dict[int, dict[str, Any]]:
    procs = {tp: _start(npu_model_dirs["llama"], tp) for tp in (1, 2)}
    return read_all(procs, _result)


def test_tp2_on_two_emulated_npus_gives_the_tp1_ids(runs) -> None:
    one, two = runs[1], runs[2]
    assert (two["platform"], two["worker"], two["ops"]) == (
        "AscendNpuPlatform",
        "NpuWorker",
        "NpuOps",
    )
    assert two["rank_devices"] == ["npu:0", "npu:1"] and one["rank_devices"] == ["npu:0"]
    assert two["devices"] == {"parameters": ["npu"], "kv_caches": ["npu"]}
    assert two["runs"] == one["runs"]
    assert two["cached_tokens"] == one["cached_tokens"] == [0, 128, 0, 128, 0, 128, 0, 256]
