"""DeepSeek-V3.2 (sparse MLA with the lightning indexer) on the host: greedy ids equal
transformers' DeepseekV32ForCausalLM in fp32.

One LLM serves every case, eager as the plan runs DSA on the host (the indexer's
step-reading part is one opaque op, called eagerly here): prompts longer than index_topk
(8) and than the 64-token step (chunked prefill), a batch of 8 mixed lengths, then the
same batch again from the prefix cache. The reference is transformers' own class,
loaded by name: in a process that has imported vLLM, AutoConfig maps `deepseek_v32` to
vLLM's DeepseekV3Config.
"""

from __future__ import annotations

import functools
import random

import pytest
import torch
from engine_teardown import shut_down

from support.hf_reference import MODELS_DIR, make_models_module
from support.host_engine import family_llm, greedy_outputs

MAX_NEW = 10
BLOCK = 16
TOPK = 8


def _prompts(seed: int, lengths: list[int]) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 500) for _ in range(n)] for n in lengths]


@functools.cache
def _model_dir() -> str:
    return str(make_models_module().make_dsv32_model(MODELS_DIR / "tiny-deepseek_v32"))


@functools.cache
def _hf(index_topk: int = TOPK):  # type: ignore[no-untyped-def]
    from transformers.models.deepseek_v32 import DeepseekV32Config, DeepseekV32ForCausalLM

    config = DeepseekV32Config.from_pretrained(_model_dir(), index_topk=index_topk)
    return DeepseekV32ForCausalLM.from_pretrained(
        _model_dir(), config=config, dtype=torch.float32
    ).eval()


def _reference(prompts: list[list[int]], index_topk: int = TOPK) -> list[list[int]]:
    model = _hf(index_topk)
    out = []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt])
            gen = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=MAX_NEW, min_new_tokens=MAX_NEW)
            out.append(gen[0, len(prompt):].tolist())
    return out


@pytest.fixture(scope="module")
def llm():  # type: ignore[no-untyped-def]
    engine = family_llm(_model_dir(), block_size=BLOCK)
    yield engine
    shut_down(engine)



def test_every_layer_is_sparse_mla_with_our_indexer(llm) -> None:  # type: ignore[no-untyped-def]
    from adapters.vllm.attention.sparse_mla import (
        SparseIndexer,
        SparseIndexerBackend,
        SparseMlaAttentionBackend,
    )

    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    backends = {m.attn_backend for m in model.modules() if hasattr(m, "attn_backend")}
    assert backends == {SparseMlaAttentionBackend}
    indexers = [m for m in model.modules() if type(m).__name__ == "Indexer"]
    assert len(indexers) == 2
    for indexer in indexers:
        assert isinstance(indexer.forward, SparseIndexer)
        assert indexer.k_cache.get_attn_backend() is SparseIndexerBackend
        assert indexer.k_cache.kv_cache.dtype == torch.float32
        assert indexer.k_cache.kv_cache.shape[-1] == indexer.head_dim


def test_the_host_runs_dsa_eagerly_through_the_indexers_opaque_op(llm) -> None:  # type: ignore[no-untyped-def]
    """The plan's host choice for DSA (its one Inductor graph ran the indexer's op after
    the attention that reads its top-k: all-zero ids); the indexer's op is registered."""
    from vllm.config import CompilationMode

    from adapters.vllm.attention.names import SPARSE_INDEXER_OP

    compilation = llm.llm_engine.vllm_config.compilation_config
    assert compilation.mode == CompilationMode.NONE
    assert hasattr(torch.ops.vllm, SPARSE_INDEXER_OP)


def test_the_selection_matters_for_these_prompts() -> None:
    """Dense attention (index_topk above every length) continues the long prompts
    otherwise: the parity below tests the indexer's choice, not attention alone."""
    prompts = _prompts(1, [70, 200])
    assert _reference(prompts, index_topk=4096) != _reference(prompts)


def test_single_prompts_spanning_many_blocks(llm) -> None:  # type: ignore[no-untyped-def]
    prompts = _prompts(1, [5, 70, 200])  # 200 tokens: 13 blocks, prefilled in 4 chunks
    got = [list(o.outputs[0].token_ids) for o in greedy_outputs(llm, prompts, MAX_NEW)]
    assert got == _reference(prompts)


def test_batch_of_eight_mixed_lengths_then_prefix_cache_hits(llm) -> None:  # type: ignore[no-untyped-def]
    prompts = _prompts(2, [3, 17, 33, 48, 64, 90, 129, 150])
    expected = _reference(prompts)
    first = greedy_outputs(llm, prompts, MAX_NEW)
    assert [list(o.outputs[0].token_ids) for o in first] == expected
    second = greedy_outputs(llm, prompts, MAX_NEW)
    assert [list(o.outputs[0].token_ids) for o in second] == expected
    cached = [o.num_cached_tokens for o in second]
    assert all(c >= (len(p) - 1) // BLOCK * BLOCK for c, p in zip(cached, prompts, strict=True))
    assert sum(cached) > 0


def test_kv_bytes_per_token_are_what_the_doctor_plans(llm) -> None:  # type: ignore[no-untyped-def]
    """The core's KV bytes per token (the doctor's budget) equal what the workers
    allocated: per layer the latent (kv_lora_rank + rope) and the indexer's keys."""
    import json
    from pathlib import Path

    from ascend_core.memory_budget.sizes import KvLayout, kv_bytes_per_token
    from ascend_core.model_facts import model_facts_from_config

    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    blocks = llm.llm_engine.vllm_config.cache_config.num_gpu_blocks
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in runner.kv_caches}
    allocated = sum(storages.values()) / (blocks * BLOCK)
    config = json.loads((Path(_model_dir()) / "config.json").read_text())
    planned = kv_bytes_per_token(model_facts_from_config(config), kv_dtype_bytes=4)
    assert planned.layout is KvLayout.MLA
    assert planned.bytes == 2 * (32 + 16 + 32) * 4  # 2 layers x (latent + rope + index keys)
    assert allocated == planned.bytes
