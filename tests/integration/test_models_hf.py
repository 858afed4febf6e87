"""The locally made models load in transformers and make a usable greedy oracle."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from support import hf_reference as hf

STYLES = ["llama", "qwen3"]
PROMPTS = [
    "def main():",
    "import os\nimport sys",
    "The quick brown fox",
    "class Foo(object):\n    pass",
    "for i in range(10):",
]


@pytest.fixture(scope="module", params=STYLES)
def tiny(request: pytest.FixtureRequest) -> Path:
    return hf.local_model(request.param, "tiny")


def test_config_is_the_requested_architecture(tiny: Path) -> None:
    config = json.loads((tiny / "config.json").read_text())
    style = json.loads((tiny / ".make_models.json").read_text())["style"]
    expected = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}[style]
    assert config["architectures"] == [expected]
    assert config["num_attention_heads"] > config["num_key_value_heads"]  # GQA
    assert config["max_position_embeddings"] >= 4096
    assert config["dtype"] == "float32"
    model, _ = hf.load(tiny)
    names = {name for name, _ in model.named_parameters()}
    has_qk_norm = any(name.endswith("self_attn.q_norm.weight") for name in names)
    assert has_qk_norm == (style == "qwen3")


def test_tokenizer_round_trips_and_has_a_chat_template(tiny: Path) -> None:
    _, tok = hf.load(tiny)
    text = "def f(x):\n    return x * 2  # ok"
    ids = tok(text, add_special_tokens=False).input_ids
    assert tok.decode(ids) == text
    assert tok.bos_token and tok.eos_token and tok.pad_token
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert chat.endswith("<|im_start|>assistant\n") and "hi" in chat


def test_greedy_is_deterministic_and_runs_full_length(tiny: Path) -> None:
    first = hf.greedy_token_ids(tiny, PROMPTS, 12)
    hf._load.cache_clear()  # a fresh load must give the same answer
    second = hf.greedy_token_ids(tiny, PROMPTS, 12)
    assert first == second
    assert all(len(ids) == 12 for ids in first)


def test_continuations_depend_on_the_prompt_and_move_on(tiny: Path) -> None:
    outs = hf.greedy_token_ids(tiny, PROMPTS, 12)
    assert len({tuple(ids) for ids in outs}) == len(PROMPTS)
    for ids in outs:
        assert len(set(ids)) >= 4, f"continuation collapses to a few tokens: {ids}"


def test_logits_are_not_flat(tiny: Path) -> None:
    gen = hf.greedy_generate(tiny, PROMPTS[:3], 4)
    for g in gen:
        # A clear winner: the chosen token is far likelier than uniform and than runner-up.
        vocab = hf.load(tiny)[0].config.vocab_size
        assert all(lp > -torch.log(torch.tensor(vocab)).item() + 3 for lp in g.logprobs)
        top = sorted(g.top_logprobs[0].values(), reverse=True)
        assert top[0] == pytest.approx(g.logprobs[0])
        assert top[0] - top[1] > 1e-3
    lp = hf.next_token_logprobs(tiny, PROMPTS[0])
    assert float(lp.exp().sum()) == pytest.approx(1.0, abs=1e-4)
    assert float(lp.std()) > 1.0


def test_batched_left_padded_generate_matches_the_oracle(tiny: Path) -> None:
    # The oracle runs prompts alone; padded batches in float32 must agree with it.
    model, tok = hf.load(tiny)
    batch = tok(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=8, do_sample=False)
    batched = out[:, batch.input_ids.shape[1] :].tolist()
    assert batched == hf.greedy_token_ids(tiny, PROMPTS, 8)


def test_prompt_logprobs_align_with_next_token_logprobs(tiny: Path) -> None:
    ids = hf.prompt_ids(tiny, PROMPTS[1])
    lps = hf.prompt_logprobs(tiny, ids)
    assert lps[0] is None and len(lps) == len(ids)
    full = hf.prompt_logprobs_full(tiny, ids)
    assert lps[2] == pytest.approx(float(full[1, ids[2]]))
    assert torch.equal(hf.next_token_logprobs(tiny, ids), full[-1])


def _digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


def test_make_model_is_reproducible_and_idempotent(tmp_path: Path) -> None:
    a = hf.make_model(tmp_path / "a", "qwen3", "tiny", seed=3)
    b = hf.make_model(tmp_path / "b", "qwen3", "tiny", seed=3)
    assert _digest(a) == _digest(b)
    mtime = (a / "model.safetensors").stat().st_mtime_ns
    assert hf.make_model(a, "qwen3", "tiny", seed=3) == a
    assert (a / "model.safetensors").stat().st_mtime_ns == mtime  # not rebuilt
    c = hf.make_model(tmp_path / "a", "qwen3", "tiny", seed=4)  # other seed: rebuilt
    assert _digest(c)["model.safetensors"] != _digest(b)["model.safetensors"]
    assert _digest(c)["tokenizer.json"] == _digest(b)["tokenizer.json"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".a.") and p.is_dir()]


def test_bfloat16_variant_loads_and_generates(tmp_path: Path) -> None:
    path = hf.make_model(tmp_path / "bf16", "llama", "tiny", dtype="bfloat16")
    assert json.loads((path / "config.json").read_text())["dtype"] == "bfloat16"
    model, _ = hf.load(path, torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16
    assert len(hf.greedy_token_ids(path, PROMPTS[:1], 4, torch.bfloat16)[0]) == 4


def test_unknown_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="style"):
        hf.make_model(tmp_path / "x", "gpt2", "tiny")
    with pytest.raises(ValueError, match="size"):
        hf.make_model(tmp_path / "x", "llama", "huge")
