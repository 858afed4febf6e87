"""`vllm serve` answers chat for Qwen3-Next (hybrid gated delta net + full attention),
Qwen3.5-MoE (the same layout, its GDN projections stored apart), DeepSeek-V3.2 (sparse
MLA with the lightning indexer), Kimi-Linear (hybrid KDA + NoPE MLA, the plugin's own
model class) and DeepSeek-V4 (compressed sparse attention, hyper-connections, hash- and
score-routed MoE; the plugin's own class AscendDeepseekV4ForCausalLM) on the host: each
answer is transformers' greedy continuation of the same rendered prompt ids (the server's
/tokenize), so the server ran the family's own layers, not just the HTTP layer. The
servers start at once (eager, fp32).

vLLM renders DeepSeek-V3.2's and DeepSeek-V4's chats with its own encoders (tokenizer_mode
"deepseek_v32" / "deepseek_v4", its default for those architectures), not the tokenizer's
chat template; the tiny models' tokenizers hold none of DeepSeek's special tokens, so the
encoder's markers are spelled out in ordinary tokens. V4's encoder defaults to thinking
mode with high reasoning effort: the prompt (~220 tokens) carries its reasoning-effort
preamble and ends in "<think>", past the tiny V4's sliding window (16) and both
compression rates (4, 128). The test asserts that rendering rather than assuming a template.

(gpt-oss is served by tests/e2e/test_serve_gpt_oss.py with completions: its chats are
rendered in the harmony format, which the tiny test model's vocabulary cannot embed.)
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from support.hf_reference import MODELS_DIR, greedy_token_ids, load, make_models_module

sys.path.insert(0, str(Path(__file__).parent))
from test_serve import Server

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]
MAX_NEW = 8
MESSAGES = [{"role": "user", "content": "Say something about the ports of the plugin."}]


def _dsv32_greedy(model_dir: str, ids: list[int]) -> list[int]:
    """transformers' DeepSeek-V3.2 by class (vLLM's import remaps its AutoConfig), with an
    explicit attention mask (generate would mask prompt tokens equal to the pad id)."""
    from transformers.models.deepseek_v32 import DeepseekV32ForCausalLM

    model = DeepseekV32ForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    prompt = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=MAX_NEW, min_new_tokens=MAX_NEW)
    return out[0, len(ids):].tolist()


def _kimi_greedy(model_dir: str, ids: list[int]) -> list[int]:
    """transformers' Kimi-Linear by class, with its own config class (vLLM registers its own
    KimiLinearConfig for the model type with AutoConfig in a process that imports it)."""
    from transformers.models.kimi_linear import KimiLinearConfig, KimiLinearForCausalLM

    config = KimiLinearConfig.from_pretrained(model_dir)
    model = KimiLinearForCausalLM.from_pretrained(
        model_dir, config=config, dtype=torch.float32
    ).eval()
    prompt = torch.tensor([ids])
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                             max_new_tokens=MAX_NEW, min_new_tokens=MAX_NEW,
                             eos_token_id=None)
    return out[0, len(ids):].tolist()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    models = make_models_module()
    dirs = {
        "qwen3_next": str(models.make_qwen3_next(MODELS_DIR / "tiny-qwen3_next")),
        "qwen3_5_moe": str(
            models.make_qwen3_5(MODELS_DIR / "tiny-qwen3_5_moe", style="qwen3_5_moe")
        ),
        "deepseek_v32": str(models.make_dsv32_model(MODELS_DIR / "tiny-deepseek_v32")),
        "kimi_linear": str(models.make_kimi_linear(MODELS_DIR / "tiny-kimi_linear")),
        "deepseek_v4": str(models.make_dsv4_model(MODELS_DIR / "tiny-deepseek_v4")),
    }
    logs = tmp_path_factory.mktemp("log")
    started = {name: Server(d, logs / f"{name}.log") for name, d in dirs.items()}
    try:
        for srv in started.values():
            srv.wait_ready()
        yield started
    finally:
        for srv in started.values():
            srv.stop()


@pytest.mark.parametrize(
    "family", ["qwen3_next", "qwen3_5_moe", "deepseek_v32", "kimi_linear", "deepseek_v4"]
)
def test_chat_answer_is_the_models_greedy_continuation(
    servers: dict[str, Server], family: str
) -> None:
    import httpx
    from openai import OpenAI

    server = servers[family]
    client = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    r = client.chat.completions.create(
        model=server.model, messages=MESSAGES, max_tokens=MAX_NEW, temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert r.usage.completion_tokens == MAX_NEW and r.choices[0].message.content

    # The prompt ids as the server renders the chat (vLLM renders DeepSeek-V3.2's and V4's
    # chats with its own encoders, not the tokenizer's template): its /tokenize endpoint.
    rendered = httpx.post(
        f"{server.url}/tokenize",
        json={"model": server.model, "messages": MESSAGES, "add_generation_prompt": True},
        timeout=30,
    )
    rendered.raise_for_status()
    ids = rendered.json()["tokens"]
    assert r.usage.prompt_tokens == len(ids)
    if family == "kimi_linear":  # load()'s AutoModel would take vLLM's config class
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(server.model)
        expected = _kimi_greedy(server.model, ids)
    else:
        _, tokenizer = load(server.model)
        if family == "deepseek_v32":
            expected = _dsv32_greedy(server.model, ids)
        else:
            if family == "deepseek_v4":  # vLLM's V4 encoder, thinking mode, not the template
                from vllm.tokenizers import deepseek_v4_encoding as v4

                text = tokenizer.decode(ids)
                assert text.startswith(v4.bos_token) and "<|im_start|>" not in text
                assert text.endswith(
                    v4.USER_SP_TOKEN + MESSAGES[0]["content"] + v4.ASSISTANT_SP_TOKEN
                    + v4.thinking_start_token
                )
            expected = greedy_token_ids(server.model, [ids], MAX_NEW, ignore_eos=True)[0]
    assert r.choices[0].message.content == tokenizer.decode(expected, skip_special_tokens=True)
