"""The note an engine process leaves for the front end that watches it
(adapters.vllm.engine.startup_errors), without vLLM: a watching parent, a child that stops on our
error, the repeat at exit."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PARENT = """
import os, subprocess, sys
from adapters.vllm.engine.startup_errors import watch_engine_errors
watch_engine_errors()
print(os.getpid())
child = subprocess.run([sys.executable, "-c", sys.argv[1]])
if child.returncode and sys.argv[2] == "fail":
    raise RuntimeError("Engine core initialization failed. See root cause above.")
"""
CHILD = """
from adapters.vllm.engine.startup_errors import stop_on_our_errors
from ascend_core.errors import ConfigError
class Uni:
    distributed_executor_backend = "uni"
with stop_on_our_errors(Uni()):
    raise ConfigError("the KV cache is too small.", "raise --kv-cache-memory-bytes")
"""
# A TP > 1 engine: the engine process starts two worker processes (vLLM's multiprocessing
# executor); each stops on our error, which goes back to vLLM as an ordinary exception.
WORKER = """
from adapters.vllm.engine.startup_errors import stop_on_our_errors
from ascend_core.errors import ConfigError
class Mp:
    distributed_executor_backend = "mp"
with stop_on_our_errors(Mp()):
    raise ConfigError("the KV cache is too small.", "raise --kv-cache-memory-bytes")
"""
ENGINE = f"""
import subprocess, sys
workers = [subprocess.Popen([sys.executable, "-c", {WORKER!r}]) for _ in range(2)]
if any([w.wait() for w in workers]):  # wait for both
    raise RuntimeError("WorkerProc initialization failed")
"""


def _parent(outcome: str, child: str = CHILD) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-c", PARENT, child, outcome], capture_output=True, text=True, env=env
    )


def test_the_childs_reason_is_repeated_after_the_parents_traceback() -> None:
    done = _parent("fail")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    # The child's own exit: the message alone; then the parent's traceback; then ours.
    assert lines[0] == (
        "vllm-plugin-ascend: the KV cache is too small. Fix: raise --kv-cache-memory-bytes"
    )
    assert "Traceback (most recent call last):" in lines
    assert lines[-1] == (
        "vllm-plugin-ascend: the engine process stopped at startup: the KV cache is too "
        "small. Fix: raise --kv-cache-memory-bytes"
    )


def test_a_parent_that_ends_without_an_error_repeats_nothing_and_leaves_no_note() -> None:
    done = _parent("ok")
    assert done.returncode == 0
    assert "stopped at startup" not in done.stderr
    pid = int(done.stdout.split()[0])
    assert not (Path(tempfile.gettempdir()) / f"vllm-plugin-ascend-{pid}.startup-error").exists()


def test_worker_processes_of_a_tp_engine_reach_the_front_end_once() -> None:
    done = _parent("fail", ENGINE)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    # The workers' and the engine's tracebacks are vLLM's to print; our reason ends it, once.
    assert "WorkerProc initialization failed" in done.stderr
    assert lines[-1] == (
        "vllm-plugin-ascend: the engine process stopped at startup: the KV cache is too "
        "small. Fix: raise --kv-cache-memory-bytes"
    )
    assert sum("stopped at startup" in line for line in lines) == 1
