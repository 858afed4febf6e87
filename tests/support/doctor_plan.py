"""`ascend-doctor plan --json` of a model on the host device, as the tests read it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

DOCTOR = Path(sys.executable).with_name("ascend-doctor")
# Bytes a linear layer may hold beyond its tensors' headers: the derived per-tensor scalars
# (1 / input_scale, the offset) and input_offset held float32 (int8 in the file).
PER_LAYER_MARGIN = 64


def doctor_memory(
    model: str, dtype: str = "float32", extra: tuple[str, ...] = (), npu: bool = False
) -> dict[str, Any]:
    """The plan's memory section for `model` served in `dtype` (max_model_len 512, then
    the `vllm serve` arguments `extra`), on the host device, or with `npu` on an A2 NPU
    (the weights as an NPU holds them)."""
    env = _env(npu)
    chip = ("--chip", "A2") if npu else ()
    done = subprocess.run([str(DOCTOR), "plan", "--json", *chip, "--", model, "--dtype", dtype,
                           "--max-model-len", "512", *extra],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.stdout.lstrip().startswith("{"), done.stderr[-2000:]
    data: dict[str, Any] = json.loads(done.stdout)["data"]["memory"]
    return data


def doctor_memories(cases: list[tuple[str, str]], npu: bool = False) -> list[dict[str, Any]]:
    """doctor_memory of each (model, dtype), all planned in one child process
    (support.doctor_plans: one start of vLLM and the plugin for them all). One child plans
    for one device: the plugin decides its device once a process."""
    from support.doctor_plans import doctor_plans

    chip = ["--chip", "A2"] if npu else []
    argvs = [[*chip, "--", model, "--dtype", dtype, "--max-model-len", "512"]
             for model, dtype in cases]
    return [plan["data"]["memory"] for plan in doctor_plans(argvs, _env(npu))]


def _env(npu: bool) -> dict[str, str]:
    env = host_env()
    if npu:
        env["VLLM_ASCEND_DEVICE"] = "auto"  # no NPU here: the plan's nominal A2
    return env


def host_env() -> dict[str, str]:
    """This process's environment for a doctor on the host device: no other VLLM_ASCEND_
    setting of this process's leaks in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_")}
    env["VLLM_ASCEND_DEVICE"] = "cpu"
    return env
