"""`vllm serve` on the emulated NPU: scripts/emulated_npu.py -- vllm serve, with
VLLM_ASCEND_DEVICE=npu, answers completions and chat (streaming too) and stops cleanly.

AscendNpuPlatform, NpuWorker and NpuModelRunner with the model on the emulated `npu`
device (host memory underneath): an emulator, not Ascend hardware.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_serve import _STOP_WITHIN_S, Server, _complete

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


def test_completion_and_its_stream_agree(server: Server, client) -> None:  # type: ignore[no-untyped-def]
    text = _complete(client, server.model, "The plugin serves")
    assert text
    stream = client.completions.create(
        model=server.model, prompt="The plugin serves", max_tokens=12, temperature=0, stream=True
    )
    pieces = [c.choices[0].text for c in stream if c.choices]
    assert len(pieces) > 1 and "".join(pieces) == text


def test_chat_plain_and_streaming(server: Server, client) -> None:  # type: ignore[no-untyped-def]
    messages = [{"role": "user", "content": "Say something about ports."}]
    r = client.chat.completions.create(
        model=server.model, messages=messages, max_tokens=10, temperature=0
    )
    content = r.choices[0].message.content
    assert r.usage.completion_tokens == 10 and content
    stream = client.chat.completions.create(
        model=server.model, messages=messages, max_tokens=10, temperature=0, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == content


def test_sigterm_stops_the_server(server: Server) -> None:
    code = server.stop()
    log = server.log_path.read_text()
    assert code == 0, log[-3000:]
    assert server.stop_seconds is not None and server.stop_seconds < _STOP_WITHIN_S
    assert "Application shutdown complete" in log
    assert "EngineCore encountered a fatal error" not in log
