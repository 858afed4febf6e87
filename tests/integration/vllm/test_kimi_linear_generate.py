"""Kimi-Linear (hybrid: Kimi-delta-attention linear layers + a NoPE MLA layer, sparse MoE with
a shared expert) through the plugin on the host, fp32: greedy ids equal transformers' (its torch
fallback of the KDA kernels).

One LLM, the host's default (compiled) path: a batch of 8 mixed lengths (the longest past the
KDA chunk of 64 rows several times) with chunked prefill (max_num_batched_tokens=64, so states
carry across chunks and decodes mix with prefills). Prefix caching is asked for and the plan
turns it off, with the reason (vLLM's align mode copies the KDA states with a Triton kernel
neither device implements); a second pass of the same batch gives the same ids from fresh
states.
"""

from __future__ import annotations

import random

import pytest
from engine_teardown import shut_down

from support.hf_reference import MODELS_DIR, make_models_module
from support.host_engine import family_llm, greedy_outputs

MAX_NEW = 10
LENGTHS = [3, 17, 33, 64, 90, 150, 300, 420]


@pytest.fixture(scope="module")
def model_dir() -> str:
    return str(make_models_module().make_kimi_linear(MODELS_DIR / "tiny-kimi_linear"))


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    rng = random.Random(2)
    return [[rng.randrange(2, 500) for _ in range(n)] for n in LENGTHS]


@pytest.fixture(scope="module")
def expected(model_dir: str, prompts: list[list[int]]) -> list[list[int]]:
    """transformers' greedy ids, each prompt on its own. Its classes named outright: vLLM
    registers its own KimiLinearConfig for the model type with transformers' AutoConfig, and
    transformers' model needs its own config's derived fields (layer_types and the rest)."""
    import torch
    from transformers.models.kimi_linear import KimiLinearConfig, KimiLinearForCausalLM

    config = KimiLinearConfig.from_pretrained(model_dir)
    model = KimiLinearForCausalLM.from_pretrained(model_dir, config=config, dtype=torch.float32)
    model.eval()
    out = []
    for ids in prompts:
        with torch.no_grad():
            new = model.generate(
                torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=None,
            )[0, len(ids):]
        out.append(new.tolist())
    return out


@pytest.fixture(scope="module")
def llm(model_dir: str):  # type: ignore[no-untyped-def]
    engine = family_llm(model_dir)
    yield engine
    shut_down(engine)



def test_our_class_with_the_kda_layers_on_our_ops_and_no_prefix_caching(llm) -> None:  # type: ignore[no-untyped-def]
    from adapters.torch.linear_attention import TorchLinearAttentionOps
    from adapters.vllm.layers.kda import AscendKimiDeltaAttention
    from adapters.vllm.models.kimi_linear import AscendKimiLinearForCausalLM

    config = llm.llm_engine.vllm_config
    assert config.cache_config.mamba_cache_mode == "none"
    assert not config.cache_config.enable_prefix_caching
    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    assert isinstance(model, AscendKimiLinearForCausalLM)
    kda = [m for m in model.modules() if isinstance(m, AscendKimiDeltaAttention)]
    assert len(kda) == 3
    assert all(isinstance(m.linear_ops, TorchLinearAttentionOps) for m in kda)


def test_batch_of_eight_twice(llm, prompts, expected) -> None:  # type: ignore[no-untyped-def]
    first = greedy_outputs(llm, prompts, MAX_NEW)
    assert [list(o.outputs[0].token_ids) for o in first] == expected
    # Prefix caching is off: fresh states, no cached tokens.
    second = greedy_outputs(llm, prompts, MAX_NEW)
    assert [list(o.outputs[0].token_ids) for o in second] == expected
    assert [o.num_cached_tokens for o in second] == [0] * len(prompts)


def test_kv_bytes_per_token_are_what_the_doctor_plans(llm, model_dir: str) -> None:  # type: ignore[no-untyped-def]
    """The core's KV bytes per token (the doctor's and the worker's budget) equal what the
    worker allocated: the MLA layer's latent and rope key only, the KDA layers' conv and
    float32 recurrent states living in pages of the same size (vLLM's hybrid allocator)."""
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
    assert facts.attention_layers == 1 and facts.hybrid and config.block_size % 128 == 0
    assert allocated == planned.bytes
