"""With triton-ascend's driver presented as active on the emulated NPU (as on an NPU host,
where vLLM's HAS_TRITON says yes and unaided vLLM picks its V2 runner), vLLM's engine
and the NPU worker agree on the V1 runner, and a batch the scheduler preempts and resumes
gives the ids of its prompts run alone.

One engine (runner_run.py, llama tiny, eager, 4 KV blocks): the preempted batch, then
each prompt alone. Before it, a config built with VLLM_USE_V2_MODEL_RUNNER=1 and the
plan's graphs (FULL_AND_PIECEWISE for Llama): the NPU's V2 runner serves them, and vLLM's
engine believes V2, with no override and no "Model Runner V2 requires Triton" traceback.
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

RUNNER = Path(__file__).with_name("runner_run.py")


@pytest.fixture(scope="module")
def run(npu_model_dirs: dict[str, str]) -> dict[str, Any]:
    env = child_env(dict(os.environ, OMP_NUM_THREADS="1"), triton_driver=True)
    env["VLLM_ASCEND_TRITON_KERNELS"] = "off"  # the emulated triton-ascend has no compiler
    env.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    proc = subprocess.run(
        [sys.executable, str(RUNNER), npu_model_dirs["llama"]],
        capture_output=True, text=True, env=env, timeout=1200,
    )
    out = proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, out[-6000:]
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    result["log"] = out
    return result


def test_vllm_sees_triton_as_on_an_npu_host_and_engine_and_worker_agree_on_v1(run) -> None:
    assert run["has_triton"] and run["worker"]["has_triton"]
    assert run["variable"] == "0"  # the plan's change, for vLLM's engine
    assert run["engine_use_v2"] is False and run["scheduler_use_v2"] is False
    assert run["worker"] == {
        "worker": "NpuWorker", "runner": "NpuModelRunner", "v1": True, "use_v2": False,
        "has_triton": True,
    }
    assert "env.VLLM_USE_V2_MODEL_RUNNER: unset -> 0" in run["log"]


def test_asking_for_v2_with_the_plans_graphs_is_served_on_v2_not_a_traceback(run) -> None:
    assert run["asked_v2_believed"] is True
    said = (
        "Ascend plan: model runner: VLLM_USE_V2_MODEL_RUNNER=1 asked for vLLM's V2 runner: "
        "the NPU worker builds it (NpuModelRunnerV2, FULL_AND_PIECEWISE graphs on the NPU's"
    )
    assert said in run["log"]
    assert "Ascend plan: env.VLLM_USE_V2_MODEL_RUNNER: 1 -> 0" not in run["log"]
    assert "requires Triton" not in run["log"]


def test_a_preempted_and_resumed_batch_gives_the_ids_of_its_prompts_run_alone(run) -> None:
    assert run["preempted_together"] > 0, "the tiny KV cache never made the scheduler preempt"
    assert run["preempted_alone"] == 0
    assert run["together"] == run["alone"]
    assert all(len(ids) == 60 for ids in run["together"])
