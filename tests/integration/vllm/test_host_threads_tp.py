"""A real tensor-parallel run on the host: the usable cores are split between the workers, in
the variable and in torch itself (forked workers inherit torch's pool size, not the env)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CHILD = Path(__file__).with_name("host_threads_run.py")


def test_each_of_two_workers_computes_on_its_share_of_the_cores(
    model_dirs: dict[str, str],
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    env.update(VLLM_ASCEND_DEVICE="cpu", VLLM_ALLOW_INSECURE_SERIALIZATION="1")
    done = subprocess.run(
        [sys.executable, str(CHILD), model_dirs["llama"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT="))
    result = json.loads(line.removeprefix("RESULT="))
    share = max(1, result["cpus"] // 2)
    assert result["workers"] == [[str(share), share], [str(share), share]]
