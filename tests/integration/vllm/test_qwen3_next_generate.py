"""Qwen3-Next (hybrid: gated-delta-net linear attention + full attention, sparse MoE with
a gated shared expert) and Qwen3.5's text models (the same layout, the GDN's input
projections stored apart; dense and MoE) through the plugin on the host, fp32: greedy ids
equal transformers' (its torch fallback of the GDN kernels).

One LLM per model, the host's default (compiled) path: a batch of 8 mixed lengths with chunked
prefill (max_num_batched_tokens=64, shorter than the long prompts, so states carry across
chunks and decodes mix with prefills). Prefix caching is asked for and the plan turns it
off (ascend_core/plan/hybrid_cache.py: vLLM's align mode copies states with a Triton
kernel neither device implements); a second pass of the same batch gives the same ids
from fresh states.
"""

from __future__ import annotations

import random

import pytest
from engine_teardown import shut_down

from support.hf_reference import MODELS_DIR, greedy_token_ids, make_models_module
from support.host_engine import family_llm, greedy_outputs

MAX_NEW = 10
# The attention block is sized to the GDN state page (272 tokens for this model): the two
# longest prompts span more than a block.
LENGTHS = [3, 17, 33, 64, 90, 150, 300, 420]


@pytest.fixture(scope="module", params=["qwen3_next", "qwen3_5", "qwen3_5_moe"])
def model_dir(request: pytest.FixtureRequest) -> str:
    models, style = make_models_module(), request.param
    if style == "qwen3_next":
        return str(models.make_qwen3_next(MODELS_DIR / "tiny-qwen3_next"))
    return str(models.make_qwen3_5(MODELS_DIR / f"tiny-{style}", style=style))


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    rng = random.Random(2)
    return [[rng.randrange(2, 500) for _ in range(n)] for n in LENGTHS]


@pytest.fixture(scope="module")
def expected(model_dir: str, prompts: list[list[int]]) -> list[list[int]]:
    return greedy_token_ids(model_dir, prompts, MAX_NEW, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(model_dir: str):  # type: ignore[no-untyped-def]
    engine = family_llm(model_dir)
    yield engine
    shut_down(engine)



def test_the_linear_attention_layers_are_ours_on_the_hybrid_cache(llm) -> None:  # type: ignore[no-untyped-def]
    from vllm.v1.attention.backends.gdn_attn import GDNAttentionBackend

    from adapters.torch.linear_attention import TorchLinearAttentionOps
    from adapters.vllm.attention.backend import PagedAttentionBackend
    from adapters.vllm.layers.gdn import AscendQwenGatedDeltaNetAttention

    config = llm.llm_engine.vllm_config
    assert config.cache_config.mamba_cache_mode == "none"
    assert not config.cache_config.enable_prefix_caching
    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    gdn = [m for m in model.modules() if isinstance(m, AscendQwenGatedDeltaNetAttention)]
    assert len(gdn) == 3
    assert all(isinstance(m.linear_ops, TorchLinearAttentionOps) for m in gdn)
    backends = {m.attn_backend if isinstance(m.attn_backend, type) else type(m.attn_backend)
                for m in model.modules() if hasattr(m, "attn_backend")}
    assert backends == {PagedAttentionBackend}
    assert {m.get_attn_backend() for m in gdn} == {GDNAttentionBackend}


def test_batch_of_eight_twice(llm, prompts, expected) -> None:  # type: ignore[no-untyped-def]
    first = greedy_outputs(llm, prompts, MAX_NEW)
    assert [list(o.outputs[0].token_ids) for o in first] == expected
    # The states of the first pass's slots are not reused.
    second = greedy_outputs(llm, prompts, MAX_NEW)
    assert [list(o.outputs[0].token_ids) for o in second] == expected
    assert [o.num_cached_tokens for o in second] == [0] * len(prompts)
    assert llm.llm_engine.vllm_config.cache_config.block_size < max(LENGTHS)


def test_kv_bytes_per_token_are_what_the_doctor_plans(llm, model_dir: str) -> None:  # type: ignore[no-untyped-def]
    """The core's KV bytes per token (the doctor's and the worker's budget) equal what the
    worker allocated: K and V of the full-attention layers only, the GDN layers' states
    living in pages of the same size (vLLM's hybrid allocator)."""
    import json
    from pathlib import Path

    import torch

    from ascend_core.memory_budget.sizes import kv_bytes_per_token
    from ascend_core.model_facts import model_facts_from_config

    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    config = llm.llm_engine.vllm_config.cache_config
    tensors = [t for entry in runner.kv_caches
               for t in (entry if isinstance(entry, (list, tuple)) else [entry])
               if isinstance(t, torch.Tensor)]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    allocated = sum(storages.values()) / (config.num_gpu_blocks * config.block_size)
    facts = model_facts_from_config(json.loads((Path(model_dir) / "config.json").read_text()))
    planned = kv_bytes_per_token(facts, kv_dtype_bytes=4)
    assert facts.attention_layers == 1 and config.block_size % 128 == 0
    assert allocated == planned.bytes
