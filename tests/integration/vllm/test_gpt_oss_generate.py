"""gpt-oss on the host through the plugin, fp32: greedy ids equal transformers'.

The tiny gpt-oss model (scripts/make_models.make_gpt_oss_model) alternates a sliding
layer (window 16) with a full one, has learned sinks in every layer and MoE experts with
a router bias, interleaved gate/up, the clamped SwiGLU and expert biases. One LLM serves
every case: prompts far longer than the window (vLLM frees the blocks behind it, which
then read as its null block), a batch of 8 mixed lengths, chunked prefill
(max_num_batched_tokens=64) and a second pass that hits the prefix cache.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from engine_teardown import shut_down

from support.hf_reference import MODELS_DIR, greedy_token_ids, make_models_module

MAX_NEW = 12
BLOCK = 16


def _prompts(seed: int, lengths: list[int]) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(5, 500) for _ in range(n)] for n in lengths]


@pytest.fixture(scope="module")
def served():  # type: ignore[no-untyped-def]
    from vllm import LLM

    model_dir = str(make_models_module().make_gpt_oss_model(MODELS_DIR / "tiny-gpt_oss"))
    llm = LLM(
        model=model_dir,
        dtype="float32",
        max_model_len=512,
        block_size=BLOCK,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        kv_cache_memory_bytes=32 << 20,
        enable_prefix_caching=True,
        seed=0,
    )
    yield model_dir, llm
    shut_down(llm)


def _generate(llm, prompts: list[list[int]]):  # type: ignore[no-untyped-def]
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    return llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)


def _model(llm):  # type: ignore[no-untyped-def]
    return llm.llm_engine.model_executor.driver_worker.worker.model_runner.model


def test_the_layers_take_windows_sinks_and_gpt_oss_experts(served) -> None:  # type: ignore[no-untyped-def]
    from adapters.vllm.attention.impl import PagedAttentionImpl
    from adapters.vllm.layers.fused_moe import AscendUnquantizedFusedMoEMethod
    from ports.moe import ExpertMlp, GateKind

    _, llm = served
    model = _model(llm)
    impls = [m.impl for m in model.modules() if hasattr(m, "impl")]
    assert all(isinstance(i, PagedAttentionImpl) for i in impls)
    assert [i.sliding_window for i in impls] == [16, None]  # layer 0 slides, layer 1 not
    assert all(i.sinks is not None and i.sinks.shape == (4,) for i in impls)
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    methods = [m.quant_method for m in model.modules() if isinstance(m, RoutedExperts)]
    assert methods and all(type(m) is AscendUnquantizedFusedMoEMethod for m in methods)
    assert {m.expert_mlp for m in methods} == {ExpertMlp(gate=GateKind.SWIGLU_OAI, biased=True)}


def test_prompts_longer_than_the_window_in_chunks(served) -> None:  # type: ignore[no-untyped-def]
    model_dir, llm = served
    prompts = _prompts(1, [5, 40, 150])  # 150 tokens: 10 blocks, prefilled in 3 chunks
    got = [list(o.outputs[0].token_ids) for o in _generate(llm, prompts)]
    assert got == greedy_token_ids(model_dir, prompts, MAX_NEW, ignore_eos=True)


def test_batch_of_eight_mixed_lengths_then_prefix_cache_hits(served) -> None:  # type: ignore[no-untyped-def]
    model_dir, llm = served
    prompts = _prompts(2, [3, 17, 33, 48, 64, 90, 100, 120])
    expected = greedy_token_ids(model_dir, prompts, MAX_NEW, ignore_eos=True)
    first = _generate(llm, prompts)
    assert [list(o.outputs[0].token_ids) for o in first] == expected
    second = _generate(llm, prompts)
    assert [list(o.outputs[0].token_ids) for o in second] == expected
    assert sum(o.num_cached_tokens for o in second) > 0


def test_kv_bytes_per_token_are_what_the_doctor_plans(served) -> None:  # type: ignore[no-untyped-def]
    """K and V per head in every layer, sliding or not. vLLM's hybrid KV-cache manager (on:
    the platform supports hybrid caches) puts sliding and full layers in groups of the same
    page size and shares each KV tensor between one layer of each group, so a block of the
    pool holds 1/groups of the layers: the doctor's bytes per token of context (every
    layer) are the pool's bytes per block-token times the number of groups."""
    from ascend_core.memory_budget.sizes import KvLayout, kv_bytes_per_token
    from ascend_core.model_facts import model_facts_from_config

    model_dir, llm = served
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    blocks = llm.llm_engine.vllm_config.cache_config.num_gpu_blocks
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in runner.kv_caches}
    allocated = sum(storages.values()) / (blocks * BLOCK)
    facts = model_facts_from_config(json.loads((Path(model_dir) / "config.json").read_text()))
    planned = kv_bytes_per_token(facts, kv_dtype_bytes=4)
    assert planned.layout is KvLayout.STANDARD
    groups = len(runner.kv_cache_config.kv_cache_groups)
    assert groups == 2  # sliding and full
    assert allocated * groups == planned.bytes
