"""`vllm serve` on the emulated NPU: scripts/emulated_npu.py -- vllm serve, with
VLLM_ASCEND_DEVICE=npu, answers completions and chat (streaming too) and stops cleanly.

AscendNpuPlatform, NpuWorker and NpuModelRunner with the model on the emulated `npu`
device (host memory underneath): an emulator, not Ascend hardware.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# The host server's client fixture and its completion and chat tests, collected here
# against this module's `server` (the emulated NPU's).
from test_serve import (  # noqa: F401
    _STOP_WITHIN_S,
    Server,
    client,
    running_server,
    test_chat_plain_and_streaming,
    test_completion_and_its_stream_agree,
)

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from running_server(tmp_path_factory, "npu")


def test_it_serves_on_the_npu_platform(server: Server) -> None:
    # vLLM names the KV cache after the platform's device_name ("NPU"); the host says CPU.
    assert "NPU KV cache size" in server.log_path.read_text()


def test_sigterm_stops_the_server(server: Server) -> None:
    code = server.stop()
    log = server.log_path.read_text()
    assert code == 0, log[-3000:]
    assert server.stop_seconds is not None and server.stop_seconds < _STOP_WITHIN_S
    assert "Application shutdown complete" in log
    assert "EngineCore encountered a fatal error" not in log
