"""Greedy token ids from LLM.generate through the plugin equal Hugging Face's, in fp32.

Dense (Llama, Qwen3), MoE with GQA (Qwen3-MoE) and MoE with MLA (DeepSeek-V3 with its
grouped sigmoid routing, DeepSeek-V2-Lite with softmax routing and no q LoRA).
One LLM per model style and path serves every case: prompts spanning many 16-token KV
blocks, a batch of 8 mixed lengths, chunked prefill (max_num_batched_tokens=64 is shorter
than the long prompts), and a second pass that must hit the prefix cache. Both paths of
the host: `compiled` is the default (the plan's one Dynamo trace, Inductor over our
custom ops) for every style; `eager` (enforce_eager) for Llama and DeepSeek-V3, the dense
and the MLA + MoE layers' eager ops (Qwen3, Qwen3-MoE and DeepSeek-V2 run the same ops;
test_bf16_agreement runs DeepSeek-V2 eagerly too).
"""

from __future__ import annotations

import random

import pytest
import torch
from engine_teardown import shut_down

from support.hf_reference import greedy_token_ids

MAX_NEW = 12
BLOCK = 16


def _prompts(seed: int, lengths: list[int]) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(2, 500) for _ in range(n)] for n in lengths]


STYLES = ["llama", "qwen3", "qwen3_moe", "deepseek_v3", "deepseek_v2"]
EAGER_STYLES = ["llama", "deepseek_v3"]
MLA_STYLES = {"deepseek_v3", "deepseek_v2"}
MOE_STYLES = {"qwen3_moe", "deepseek_v3", "deepseek_v2"}


@pytest.fixture(
    scope="module",
    params=[(style, "compiled") for style in STYLES]
    + [(style, "eager") for style in EAGER_STYLES],
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
    yield style, path, model_dir, llm
    shut_down(llm)


def _generate(llm, prompts: list[list[int]]):  # type: ignore[no-untyped-def]
    from vllm import SamplingParams, TokensPrompt

    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    return llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)


def test_the_plugin_serves(served) -> None:  # type: ignore[no-untyped-def]
    from vllm.platforms import current_platform

    from adapters.vllm.attention.backend import PagedAttentionBackend
    from adapters.vllm.attention.mla import MlaAttentionBackend
    from adapters.vllm.layers.custom_ops import (
        AscendRMSNorm,
        AscendRotaryEmbedding,
        AscendSiluAndMul,
    )
    from adapters.vllm.layers.fused_moe import AscendUnquantizedFusedMoEMethod

    style, path, _, llm = served
    assert type(current_platform).__name__ == "AscendHostPlatform"
    mode = llm.llm_engine.vllm_config.compilation_config.mode
    assert mode.name == ("DYNAMO_TRACE_ONCE" if path == "compiled" else "NONE")
    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    kinds = {type(m) for m in model.modules()}
    assert {AscendRMSNorm, AscendRotaryEmbedding} <= kinds
    # Every MLP of Qwen3-MoE is a MoE layer; the others have dense ones.
    assert (AscendSiluAndMul in kinds) == (style != "qwen3_moe")
    backends = {type(m.attn_backend) if not isinstance(m.attn_backend, type) else m.attn_backend
                for m in model.modules() if hasattr(m, "attn_backend")}
    assert backends == {MlaAttentionBackend if style in MLA_STYLES else PagedAttentionBackend}
    moe_methods = {type(m.quant_method) for m in model.modules()
                   if type(m).__name__ == "RoutedExperts"}
    assert moe_methods == ({AscendUnquantizedFusedMoEMethod} if style in MOE_STYLES else set())


def test_the_host_calls_its_moe_layers_directly(served) -> None:  # type: ignore[no-untyped-def]
    """Where the native experts take the weights, each MoE method says its ops trace, and
    the runner enters the layer through the host's patched entry, which then calls vLLM's
    `_moe_forward` itself rather than the opaque moe_forward op (patch host-moe-direct-entry):
    the parity cases here run on that path, compiled and eager."""
    from vllm.model_executor.layers.fused_moe.runner import moe_runner

    from adapters.cpu import native

    style, _, _, llm = served
    if style not in MOE_STYLES:
        pytest.skip("no MoE layers")
    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    runners = [m for m in model.modules() if isinstance(m, moe_runner.MoERunner)]
    assert runners
    for runner in runners:
        method = runner.routed_experts.quant_method
        assert method.traced_in_graph == (native.moe_experts() is not None)
        assert runner._forward_entry.__name__ == "moe_entry"


def test_the_host_gemm_weights_are_packed_at_load(served) -> None:  # type: ignore[no-untyped-def]
    """Every unquantized linear layer and the LM head hold their packed oneDNN weight
    from the load on (host_linear.prepack_weights, through the host-GEMM port), the one
    the GEMM then reads, and a plain-tensor alias of the weight (its storage and version
    counter) for the graph."""
    from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    from adapters.cpu import host_gemm, native

    _, _, _, llm = served
    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    layers = [m for m in model.modules()
              if (isinstance(m, LinearBase) and isinstance(m.quant_method, UnquantizedLinearMethod))
              or isinstance(m, ParallelLMHead)]
    assert any(isinstance(m, ParallelLMHead) for m in layers) and len(layers) > 4
    built = native.packed_linear() is not None
    assert (host_gemm._native_linear is not None) == built  # the native GEMM where built
    held = torch.ops.ascend_host_native.packed_linear_cache_size() if built else None
    for layer in layers:
        plain = getattr(layer, host_gemm._PLAIN)
        assert type(plain) is torch.Tensor and plain.data_ptr() == layer.weight.data_ptr()
        assert plain._version == layer.weight._version
        if not built:
            entry = host_gemm._packed_by_weight.get(id(plain))
            assert entry is not None and entry[0]() is plain, type(layer).__name__
        packed = host_gemm.packed_weight(layer, layer.weight)
        assert host_gemm._packed_for(plain) is packed  # the alias reads the same pack
    if built:
        assert torch.ops.ascend_host_native.packed_linear_cache_size() == held  # no new pack


def test_single_prompts_spanning_many_blocks(served) -> None:  # type: ignore[no-untyped-def]
    _, _, model_dir, llm = served
    prompts = _prompts(1, [5, 70, 200])  # 200 tokens: 13 blocks, prefilled in 4 chunks
    got = [o.outputs[0].token_ids for o in _generate(llm, prompts)]
    assert [list(g) for g in got] == greedy_token_ids(model_dir, prompts, MAX_NEW, ignore_eos=True)


def test_batch_of_eight_mixed_lengths_then_prefix_cache_hits(served) -> None:  # type: ignore[no-untyped-def]
    _, _, model_dir, llm = served
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


def test_kv_bytes_per_token_are_what_the_doctor_plans(served) -> None:  # type: ignore[no-untyped-def]
    """The core's KV bytes per token (the doctor's and the worker's budget) equal what
    the backend allocated: the MLA latent (kv_lora_rank + rope) or K and V per head."""
    import json
    from pathlib import Path

    from ascend_core.memory_budget.sizes import KvLayout, kv_bytes_per_token
    from ascend_core.model_facts import model_facts_from_config

    style, _, model_dir, llm = served
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    blocks = llm.llm_engine.vllm_config.cache_config.num_gpu_blocks
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in runner.kv_caches}  # one per layer (views of one buffer count once)
    allocated = sum(storages.values()) / (blocks * BLOCK)
    facts = model_facts_from_config(json.loads((Path(model_dir) / "config.json").read_text()))
    planned = kv_bytes_per_token(facts, kv_dtype_bytes=4)
    assert planned.layout is (KvLayout.MLA if style in MLA_STYLES else KvLayout.STANDARD)
    assert allocated == planned.bytes
