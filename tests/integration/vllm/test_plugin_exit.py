"""A process the plugin serves in ends without nanobind's leak report of Triton's bindings.

vLLM freezes the heap once started (gc.freeze), which keeps Triton's nanobind types alive
past the interpreter's last collection; nanobind then printed ~30 lines at every stop.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

from adapters.vllm.engine.plugin import unfreeze_gc_at_exit

SRC = Path(__file__).resolve().parents[3] / "src"

# What vLLM's server does, in short: Triton imported, the plugin asked, the heap frozen.
_SERVED = """
import gc, triton
from adapters.vllm.engine.plugin import register
assert register() is not None
gc.freeze()
"""
_UNSERVED = "import gc, triton\ngc.freeze()\n"


def _stderr_at_exit(source: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(SRC), "VLLM_ASCEND_DEVICE": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def test_the_exit_hook_hands_the_frozen_heap_back_to_the_collector() -> None:
    gc.freeze()
    try:
        assert gc.get_freeze_count() > 0
        unfreeze_gc_at_exit()
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()


def test_a_served_process_with_a_frozen_heap_exits_without_the_leak_report() -> None:
    # The premise: without the plugin's hook, Triton's bindings report their "leak".
    # (Should a Triton release stop reporting, this fails: the hook can then go.)
    assert "nanobind: leaked" in _stderr_at_exit(_UNSERVED)
    assert "nanobind" not in _stderr_at_exit(_SERVED)
