"""Several `ascend-doctor plan --json` runs in one child process (one import of vLLM and
the plugin instead of one per plan), as the tests read them.

    python tests/support/doctor_plans.py '[["MODEL", "--dtype", ...], ...]'

prints one line `PLAN <index> <json>` per plan: the JSON `ascend-doctor plan --json --
ARGV` prints (its whole stdout), in the given order. The child gets the caller's
environment (e.g. the emulated NPU's, support.torch_npu_emulator.activate.child_env).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

_PREFIX = "PLAN "


def doctor_plans(argvs: Sequence[Sequence[str]], env: dict[str, str]) -> list[dict[str, Any]]:
    """For each `vllm serve` argument list (the model first), what the doctor's plan says:
    {"stdout": its whole output, "data": its JSON's data}."""
    done = subprocess.run(
        [sys.executable, __file__, json.dumps([list(a) for a in argvs])],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    plans = [json.loads(line.removeprefix(_PREFIX).split(" ", 1)[1])
             for line in done.stdout.splitlines() if line.startswith(_PREFIX)]  # fmt: skip
    assert done.returncode == 0 and len(plans) == len(argvs), (
        done.stdout[-2000:] + done.stderr[-2000:]
    )
    for plan in plans:
        assert plan["stdout"].lstrip().startswith("{"), plan["stdout"][-2000:]
        plan["data"] = json.loads(plan["stdout"])["data"]
    return plans


def main(argvs: list[list[str]]) -> int:
    from adapters.doctor.cli import main as doctor

    for index, argv in enumerate(argvs):
        out = io.StringIO()
        options = argv if "--" in argv else ["--", *argv]  # options before the `--`
        doctor(["plan", "--json", *options], stdout=out)
        print(f"{_PREFIX}{index} {json.dumps({'stdout': out.getvalue()})}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
