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
    model: str, dtype: str = "float32", extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The plan's memory section for `model` served in `dtype` (max_model_len 512, then
    the `vllm serve` arguments `extra`)."""
    env = host_env()
    done = subprocess.run([str(DOCTOR), "plan", "--json", "--", model, "--dtype", dtype,
                           "--max-model-len", "512", *extra],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.stdout.lstrip().startswith("{"), done.stderr[-2000:]
    data: dict[str, Any] = json.loads(done.stdout)["data"]["memory"]
    return data


def doctor_memories(cases: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """doctor_memory of each (model, dtype), all planned in one child process
    (support.doctor_plans: one start of vLLM and the plugin for them all)."""
    from support.doctor_plans import doctor_plans

    argvs = [[model, "--dtype", dtype, "--max-model-len", "512"] for model, dtype in cases]
    return [plan["data"]["memory"] for plan in doctor_plans(argvs, host_env())]


def host_env() -> dict[str, str]:
    """This process's environment for a doctor on the host device: no other VLLM_ASCEND_
    setting of this process's leaks in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_")}
    env["VLLM_ASCEND_DEVICE"] = "cpu"
    return env
