"""`vllm serve` on the emulated NPU: scripts/emulated_npu.py -- vllm serve, with
VLLM_ASCEND_DEVICE=npu, answers completions and chat (streaming too) and stops cleanly.

AscendNpuPlatform, NpuWorker and NpuModelRunner with the model on the emulated `npu`
device (host memory underneath): an emulator, not Ascend hardware.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# The host server's completion and chat tests, collected here against this module's
# `server` and `client` (the emulated NPU's).
from test_serve import (  # noqa: F401
    _STOP_WITHIN_S,
    Server,
    test_chat_plain_and_streaming,
    test_completion_and_its_stream_agree,
)

from support.hf_reference import local_model

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    model_dir = str(local_model("llama", "tiny"))
    srv = Server(model_dir, tmp_path_factory.mktemp("log") / "serve-npu.log", device="npu")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def client(server: Server):  # type: ignore[no-untyped-def]
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def test_it_serves_on_the_npu_platform(server: Server) -> None:
    log = server.log_path.read_text()
    assert "NPU KV cache size" in log  # vLLM names the platform's device in the log
    assert "NpuWorker" in log or "npu" in log


def test_sigterm_stops_the_server(server: Server) -> None:
    code = server.stop()
    log = server.log_path.read_text()
    assert code == 0, log[-3000:]
    assert server.stop_seconds is not None and server.stop_seconds < _STOP_WITHIN_S
    assert "Application shutdown complete" in log
    assert "EngineCore encountered a fatal error" not in log
