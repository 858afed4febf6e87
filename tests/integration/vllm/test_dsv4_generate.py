"""DeepSeek-V4 (compressed sparse attention, hyper-connections, hash/score-routed MoE) through
the plugin's own class on the host, fp32: greedy ids equal transformers'.

One LLM: a batch of 8 mixed lengths, the longest past the sliding window (16), the CSA
rate x the indexer's top-k (4 x 4) and the HCA rate (128) several times, with chunked prefill
(max_num_batched_tokens=64: contexts read back across chunks, decodes mixed with prefills)
and prefix caching on; a second pass of the same batch hits the cache and gives the same ids.
"""

from __future__ import annotations

import random

import pytest
from engine_teardown import shut_down

from support.hf_reference import MODELS_DIR, greedy_token_ids, make_models_module
from support.host_engine import family_llm, greedy_outputs

MAX_NEW = 10
LENGTHS = [3, 17, 33, 64, 90, 150, 300, 420]


@pytest.fixture(scope="module")
def model_dir() -> str:
    return str(make_models_module().make_dsv4_model(MODELS_DIR / "tiny-deepseek_v4"))


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    rng = random.Random(2)
    return [[rng.randrange(2, 500) for _ in range(n)] for n in LENGTHS]


@pytest.fixture(scope="module")
def expected(model_dir: str, prompts: list[list[int]]) -> list[list[int]]:
    """transformers' greedy ids, each prompt on its own (its cache carries the compressor
    states across decode steps)."""
    return greedy_token_ids(model_dir, prompts, MAX_NEW, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(model_dir: str):  # type: ignore[no-untyped-def]
    # tokenizer_mode: vLLM's default for the architecture is DeepSeek's encoder.
    engine = family_llm(model_dir, tokenizer_mode="hf")
    yield engine
    shut_down(engine)


def test_our_class_with_an_input_cache_per_layer(llm) -> None:  # type: ignore[no-untyped-def]
    from adapters.vllm.models.deepseek_v4.input_cache import InputCache
    from adapters.vllm.models.deepseek_v4.model import AscendDeepseekV4ForCausalLM

    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    assert isinstance(model, AscendDeepseekV4ForCausalLM)
    caches = [m for m in model.modules() if isinstance(m, InputCache)]
    assert len(caches) == 3
    assert all(c.kv_cache.shape[-1] == 128 for c in caches)


def test_batch_of_eight_then_from_the_prefix_cache(llm, prompts, expected) -> None:  # type: ignore[no-untyped-def]
    first = greedy_outputs(llm, prompts, MAX_NEW)
    assert [list(o.outputs[0].token_ids) for o in first] == expected
    second = greedy_outputs(llm, prompts, MAX_NEW)
    assert [list(o.outputs[0].token_ids) for o in second] == expected
    # Every whole block of a prompt (but its last token) comes from the cache: the layers'
    # inputs cached there rebuild the window, compressed rows and indexer keys.
    block = llm.llm_engine.vllm_config.cache_config.block_size
    assert [o.num_cached_tokens for o in second] == [(n - 1) // block * block for n in LENGTHS]
    assert sum(o.num_cached_tokens for o in second) > 0


def test_kv_bytes_per_token_are_what_the_doctor_plans(llm, model_dir: str) -> None:  # type: ignore[no-untyped-def]
    """The core's KV bytes per token (the doctor's and the worker's budget) equal what the
    worker allocated: each layer's attention input, hidden_size values in float32."""
    import json
    from pathlib import Path

    from adapters.vllm.models.deepseek_v4.input_cache import InputCache
    from ascend_core.memory_budget.sizes import kv_bytes_per_token
    from ascend_core.model_facts import model_facts_from_config

    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    block = llm.llm_engine.vllm_config.cache_config.block_size
    allocated = 0
    for cache in (m for m in model.modules() if isinstance(m, InputCache)):
        tensor = cache.kv_cache
        allocated += tensor.numel() * tensor.element_size() // (tensor.shape[0] * block)
    facts = model_facts_from_config(json.loads((Path(model_dir) / "config.json").read_text()))
    assert kv_bytes_per_token(facts, 4).bytes == allocated == 3 * 128 * 4
