"""`vllm serve` on the emulated NPU with NPU graphs: scripts/emulated_npu.py -- vllm serve,
with VLLM_ASCEND_DEVICE=npu and no --enforce-eager, answers completions and chat (streaming
too), captures the graphs `ascend-doctor plan` says it will, and stops cleanly.

AscendNpuPlatform, NpuWorker and NpuModelRunner with the model on the emulated `npu`
device (host memory underneath), the graphs captured and replayed by the emulated
torch_npu's NPUGraph: an emulator, not Ascend hardware.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The host server's client fixture, its completion and chat tests and its stop test,
# collected here against this module's `server` (the emulated NPU's).
from test_serve import (  # noqa: F401
    Server,
    client,
    running_server,
    serve_args,
    test_chat_plain_and_streaming,
    test_completion_and_its_stream_agree,
    test_sigterm_stops_the_server,
)

from support.hf_reference import local_model

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

# The operator asks for full decode graphs, which the NPU paged backend captures; a mode
# the backends cannot capture would be changed by the plan and logged with its reason.
ASKED = "FULL_DECODE_ONLY"
EXTRA = [f"-cc.cudagraph_mode={ASKED}"]
_CAPTURED = re.compile(r"Captured (\w+) graphs for sizes \[([\d, ]*)\]")


def _doctor(model: str, args: list[str]) -> subprocess.Popen[str]:
    """`ascend-doctor plan --json` with the server's arguments, on the emulated NPU."""
    from support.torch_npu_emulator.activate import child_env

    env = child_env({k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_")})
    env["VLLM_ASCEND_DEVICE"] = "npu"
    doctor = Path(sys.executable).with_name("ascend-doctor")
    return subprocess.Popen(
        [str(doctor), "plan", "--json", "--", model, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.fixture(scope="module")
def doctor() -> Iterator[subprocess.Popen[str]]:
    # Started before the server, so both start up together.
    proc = _doctor(str(local_model("llama", "tiny")), serve_args("npu", False, EXTRA))
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, doctor: subprocess.Popen[str]
) -> Iterator[Server]:
    yield from running_server(tmp_path_factory, "npu", eager=False, extra=EXTRA)


@pytest.fixture(scope="module")
def doctor_plan(server: Server, doctor: subprocess.Popen[str]) -> dict[str, Any]:
    assert doctor.args[-len(server.args) :] == server.args  # the same arguments
    out, err = doctor.communicate(timeout=300)
    assert out.lstrip().startswith("{"), err[-3000:]
    data: dict[str, Any] = json.loads(out)["data"]
    return data


def test_it_serves_on_the_npu_platform(server: Server) -> None:
    # vLLM names the KV cache after the platform's device_name ("NPU"); the host says CPU.
    assert "NPU KV cache size" in server.log_path.read_text()


def test_it_captures_the_graphs_the_doctor_plans(server: Server, doctor_plan) -> None:  # type: ignore[no-untyped-def]
    log = server.log_path.read_text()
    captured = _CAPTURED.findall(log)
    assert len(captured) == 1, log[-3000:]
    mode, sizes = captured[0][0], [int(s) for s in captured[0][1].split(",")]
    graphs = doctor_plan["graphs"]
    assert mode == doctor_plan["execution"]["graph_mode"] == graphs["mode"] != "NONE"
    assert sizes == graphs["capture_sizes"]
    # What the operator asked is changed only with its reason, the same in both.
    if mode != ASKED:
        change = f"compilation_config.cudagraph_mode: {ASKED} -> {mode} ("
        assert change in log
        assert any(change in line for line in doctor_plan["changes"])
    # The worker measured the graphs' memory before sizing the KV cache.
    assert f"{mode} graphs are estimated to hold" in log
