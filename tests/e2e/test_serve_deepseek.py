"""`vllm serve` of the DeepSeek-V3-style model (MLA, grouped-routing MoE) answers chat,
speculating with its MTP layer (`--speculative-config '{"method": "mtp", ...}'`).

The answer is transformers' greedy continuation of the same chat-templated prompt (which
ignores the MTP layer's weights), so the server ran the model, not just the HTTP layer,
and the drafts it verified did not move the ids; its /metrics count the drafts.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.hf_reference import greedy_token_ids, load, local_model

sys.path.insert(0, str(Path(__file__).parent))
from test_serve import Server

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]
MAX_NEW = 10
MTP = {"method": "mtp", "num_speculative_tokens": 1}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(
        str(local_model("deepseek_v3_mtp", "tiny")),
        tmp_path_factory.mktemp("log") / "ds.log",
        extra=["--speculative-config", json.dumps(MTP)],
    )
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def test_chat_answer_is_the_models_greedy_continuation(server: Server) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "Say something about latent attention."}]
    r = client.chat.completions.create(
        model=server.model, messages=messages, max_tokens=MAX_NEW, temperature=0
    )
    assert r.usage.completion_tokens == MAX_NEW and r.choices[0].message.content

    _, tokenizer = load(server.model)
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(prompt, add_special_tokens=False).input_ids
    expected = greedy_token_ids(server.model, [ids], MAX_NEW)[0]
    assert r.choices[0].message.content == tokenizer.decode(expected, skip_special_tokens=True)


def _counter(metrics: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def test_mtp_drafted_while_answering(server: Server) -> None:
    import httpx

    test_chat_answer_is_the_models_greedy_continuation(server)  # a request has run
    metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    drafts = _counter(metrics, "vllm:spec_decode_num_draft_tokens_total")
    accepted = _counter(metrics, "vllm:spec_decode_num_accepted_tokens_total")
    print(f"\nmtp k=1 under vllm serve: {accepted:.0f}/{drafts:.0f} drafts accepted")
    assert drafts > 0
    assert 0 <= accepted <= drafts
