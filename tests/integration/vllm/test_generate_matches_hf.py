"""Greedy token ids from LLM.generate through the plugin equal Hugging Face's, in fp32.

One LLM per model style and path serves every case: prompts spanning many 16-token KV
blocks, a batch of 8 mixed lengths, chunked prefill (max_num_batched_tokens=64 is shorter
than the long prompts), and a second pass that must hit the prefix cache. Both paths of
the host: `compiled` is the default (the plan's one Dynamo trace, Inductor over our
custom ops), `eager` is enforce_eager.
"""

from __future__ import annotations

import random

import pytest
from engine_teardown import shut_down

from support.hf_reference import greedy_token_ids

MAX_NEW = 12
BLOCK = 16


def _prompts(seed: int, lengths: list[int]) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(2, 500) for _ in range(n)] for n in lengths]


@pytest.fixture(
    scope="module",
    params=[("llama", "compiled"), ("qwen3", "compiled"), ("llama", "eager"), ("qwen3", "eager")],
    ids=lambda p: "-".join(p),
)
def served(request: pytest.FixtureRequest, model_dirs: dict[str, str]):  # type: ignore[no-untyped-def]
    from vllm import LLM

    style, path = request.param
    model_dir = model_dirs[style]
    llm = LLM(
        model=model_dir,
        dtype="float32",
        enforce_eager=path == "eager",
        max_model_len=512,
        block_size=BLOCK,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        kv_cache_memory_bytes=32 << 20,
        enable_prefix_caching=True,
        seed=0,
    )
    yield path, model_dir, llm
    shut_down(llm)


def _generate(llm, prompts: list[list[int]]):  # type: ignore[no-untyped-def]
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    return llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)


def test_the_plugin_serves(served) -> None:  # type: ignore[no-untyped-def]
    from vllm.platforms import current_platform

    from adapters.vllm.attention.backend import PagedAttentionBackend
    from adapters.vllm.custom_ops import AscendRMSNorm, AscendRotaryEmbedding, AscendSiluAndMul

    path, _, llm = served
    assert type(current_platform).__name__ == "AscendHostPlatform"
    mode = llm.llm_engine.vllm_config.compilation_config.mode
    assert mode.name == ("DYNAMO_TRACE_ONCE" if path == "compiled" else "NONE")
    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    kinds = {type(m) for m in model.modules()}
    assert {AscendRMSNorm, AscendSiluAndMul, AscendRotaryEmbedding} <= kinds
    backends = {type(m.attn_backend) if not isinstance(m.attn_backend, type) else m.attn_backend
                for m in model.modules() if hasattr(m, "attn_backend")}
    assert backends == {PagedAttentionBackend}


def test_single_prompts_spanning_many_blocks(served) -> None:  # type: ignore[no-untyped-def]
    _, model_dir, llm = served
    prompts = _prompts(1, [5, 70, 200])  # 200 tokens: 13 blocks, prefilled in 4 chunks
    got = [o.outputs[0].token_ids for o in _generate(llm, prompts)]
    assert [list(g) for g in got] == greedy_token_ids(model_dir, prompts, MAX_NEW, ignore_eos=True)


def test_batch_of_eight_mixed_lengths_then_prefix_cache_hits(served) -> None:  # type: ignore[no-untyped-def]
    _, model_dir, llm = served
    prompts = _prompts(2, [3, 17, 33, 48, 64, 90, 129, 150])
    expected = greedy_token_ids(model_dir, prompts, MAX_NEW, ignore_eos=True)

    first = _generate(llm, prompts)
    assert [list(o.outputs[0].token_ids) for o in first] == expected

    second = _generate(llm, prompts)
    assert [list(o.outputs[0].token_ids) for o in second] == expected
    # Every full block of a prompt seen before is served from the cache.
    cached = [o.num_cached_tokens for o in second]
    assert all(c >= (len(p) - 1) // BLOCK * BLOCK for c, p in zip(cached, prompts, strict=True))
    assert sum(cached) > 0
