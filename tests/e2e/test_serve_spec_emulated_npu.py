"""`vllm serve --speculative-config` on the emulated NPU: EAGLE-3 with make_draft's draft for
`llama_repeat` (k=3), under scripts/emulated_npu.py with VLLM_ASCEND_DEVICE=npu, the engine
in its own process as `vllm serve` runs it (bf16, block 128, eager).

One server: a completion and a chat answer with the greedy ids of the model without
speculation (transformers on the host, fp32: llama_repeat is sure of each next token by
logit margins of 80-100, so bf16 on the device does not move them), and /metrics count
the drafts and their acceptance. Bad configs stop before weights load in config building,
the same on both devices: tests/integration/vllm/test_spec_refusals.py (and the plan's
unit tests per device). An emulator, not Ascend hardware.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from test_serve import Server

from support.hf_reference import greedy_token_ids, load, local_model, make_models_module

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

MAX_NEW = 12
K = 3


def _eagle3() -> dict[str, object]:
    target = local_model("llama_repeat", "tiny")
    draft = make_models_module().make_draft(
        target.parent / f"{target.name}-eagle3", target, "eagle3"
    )
    return {"method": "eagle3", "model": str(draft), "num_speculative_tokens": K}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(
        str(local_model("llama_repeat", "tiny")),
        tmp_path_factory.mktemp("log") / "serve-npu-eagle3.log",
        device="npu",
        extra=["--speculative-config", json.dumps(_eagle3())],
    )
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


def _post(server: Server, route: str, body: dict[str, Any]) -> dict[str, Any]:
    import httpx

    r = httpx.post(f"{server.url}/v1/{route}", json={"model": server.model, **body},
                   timeout=120)
    assert r.status_code == 200, r.text[:500]
    data: dict[str, Any] = r.json()
    return data


def _greedy(model: str, ids: list[int]) -> list[int]:
    return greedy_token_ids(model, [ids], MAX_NEW, ignore_eos=True)[0]


def _answer(server: Server, route: str, body: dict[str, Any]) -> tuple[list[int], list[int]]:
    """(the prompt's ids as the server made them, the answer's ids)."""
    data = _post(server, route, {**body, "max_tokens": MAX_NEW, "temperature": 0,
                                 "ignore_eos": True, "return_token_ids": True})
    choice = data["choices"][0]
    assert data["usage"]["completion_tokens"] == MAX_NEW
    # A completion's choice holds its prompt's ids, a chat response holds them once.
    prompt = choice.get("prompt_token_ids") or data["prompt_token_ids"]
    return list(prompt), list(choice["token_ids"])


def test_it_serves_on_the_npu_platform_with_the_draft(server: Server) -> None:
    log = server.log_path.read_text()
    assert "NPU KV cache size" in log


def test_a_completion_answers_with_the_greedy_ids_without_speculation(server: Server) -> None:
    prompt, answer = _answer(server, "completions", {"prompt": "one two three one two three"})
    assert answer == _greedy(server.model, prompt)


def test_a_chat_answers_with_the_greedy_ids_without_speculation(server: Server) -> None:
    messages = [{"role": "user", "content": "Say something about drafts and drafts."}]
    prompt, answer = _answer(server, "chat/completions", {"messages": messages})
    _, tokenizer = load(server.model)
    templated = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                              tokenize=False)
    assert prompt == tokenizer(templated, add_special_tokens=False).input_ids
    assert answer == _greedy(server.model, prompt)


def _counter(metrics: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def test_metrics_count_the_drafts_and_their_acceptance(server: Server) -> None:
    import httpx

    _answer(server, "completions", {"prompt": "a b a b a b"})  # a request has run
    metrics = httpx.get(f"{server.url}/metrics", timeout=10).text
    drafts = _counter(metrics, "vllm:spec_decode_num_draft_tokens_total")
    accepted = _counter(metrics, "vllm:spec_decode_num_accepted_tokens_total")
    print(f"\neagle3 k={K} under vllm serve on the emulated NPU: {accepted:.0f}/{drafts:.0f} "
          "drafts accepted")
    assert drafts > 0
    assert 0 < accepted <= drafts

