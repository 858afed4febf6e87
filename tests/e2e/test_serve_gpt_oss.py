"""`vllm serve` of the tiny gpt-oss model (sliding window, sinks, biased clamped-SwiGLU
experts) on the host answers /v1/completions with transformers' greedy continuation.

Completions, not chat: vLLM renders gpt-oss chats in OpenAI's harmony format, whose
token ids are the o200k vocabulary's (openai_harmony is installed here), which the tiny
test model's 4k vocabulary cannot embed; a real gpt-oss checkpoint has that vocabulary.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.hf_reference import MODELS_DIR, greedy_token_ids, load, make_models_module

sys.path.insert(0, str(Path(__file__).parent))
from test_serve import Server

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]
MAX_NEW = 10


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    model = str(make_models_module().make_gpt_oss_model(MODELS_DIR / "tiny-gpt_oss"))
    srv = Server(model, tmp_path_factory.mktemp("log") / "gpt-oss.log")
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def test_completion_is_the_models_greedy_continuation(server: Server) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    # Longer than the sliding window (16 tokens), so layer 0 attends to a window only.
    prompt = "The ports and adapters of the plugin " * 4
    r = client.completions.create(
        model=server.model, prompt=prompt, max_tokens=MAX_NEW, temperature=0
    )
    assert r.usage.completion_tokens == MAX_NEW and r.usage.prompt_tokens > 16
    _, tokenizer = load(server.model)
    expected = greedy_token_ids(server.model, [prompt], MAX_NEW, ignore_eos=True)[0]
    assert r.choices[0].text == tokenizer.decode(expected, skip_special_tokens=True)
