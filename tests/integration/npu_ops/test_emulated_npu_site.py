"""Every Python process started with child_env finds the emulated NPU already wired.

vLLM starts Python subprocesses of its own (model inspection with a cold model-info
cache); with VLLM_ASCEND_DEVICE=npu they must see the same emulated NPU as the test.
"""

from __future__ import annotations

import json
import subprocess
import sys

from support.torch_npu_emulator.activate import child_env

CHILD = """
import json
from adapters.container import container
c = container()
print(json.dumps({
    "module": type(c.torch_npu()).__name__,
    "kind": c.device_decision().kind.value,
    "soc": c.torch_npu().npu.get_device_name(0),
    "devices": c.torch_npu().npu.device_count(),
}))
"""


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600
    )


def test_a_child_process_starts_on_the_emulated_npu() -> None:
    env = child_env(soc_name="Ascend910_9391", device_count=2)
    env["VLLM_ASCEND_DEVICE"] = "npu"
    done = _run(env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "module": "EmulatedTorchNpu",
        "kind": "npu",
        "soc": "Ascend910_9391",
        "devices": 2,
    }


def test_without_the_site_a_child_process_has_no_npu() -> None:
    # The converse: the wiring comes from child_env, not from leftovers of this process.
    env = child_env()
    env["EMULATED_NPU"] = "0"
    env["VLLM_ASCEND_DEVICE"] = "npu"
    done = _run(env)
    assert done.returncode != 0
    assert "torch_npu" in done.stderr
