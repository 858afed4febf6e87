"""Qwen2.5-VL and Qwen3-VL through the plugin on the host, fp32: one batch of chat prompts
with one image, two images of different sizes and none gives transformers' greedy ids,
with vLLM's expanded prompt ids equal to the processor's; a second round of the same batch
(the multimodal processor cache warm; prefix caching on, though these prompts are shorter
than a 128-token block, so no prefix hit yet) gives the same.

The tower's attention and the language model's M-RoPE compute through the ops port (the
host's plain-torch twins of the NPU's). The support matrix's host vision row rests on this
test (the parts below the engine: the towers in test_vision_tower_host.py, the expanded ids
and M-RoPE positions in test_vision_inputs_host.py).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from engine_teardown import shut_down

from support.hf_reference import MODELS_DIR, make_models_module

MAX_NEW = 8
IMAGE_SIZES = ((64, 96), (100, 60), (80, 80))
# (images by index into IMAGE_SIZES, text): one image, two, none, one again (another size).
CASES = [((0,), "def f(x):"), ((0, 1), "import os\n"), ((), "class A:"), ((2,), "for i in")]


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl"])
def model_dir(request: pytest.FixtureRequest) -> str:
    style = request.param
    return str(make_models_module().make_vl_model(MODELS_DIR / f"tiny-{style}", style))


@pytest.fixture(scope="module")
def images() -> list[Any]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    return [
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in IMAGE_SIZES
    ]


@pytest.fixture(scope="module")
def requests_and_expected(model_dir: str, images: list[Any]):  # type: ignore[no-untyped-def]
    """Per case: the vLLM prompt, the processor's ids, transformers' greedy continuation."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(model_dir)
    hf = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    out = []
    for picks, text in CASES:
        batch = [images[i] for i in picks]
        content = [*({"type": "image"} for _ in batch), {"type": "text", "text": text}]
        chat = processor.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True
        )
        inputs = processor(text=[chat], images=batch or None, return_tensors="pt")
        with torch.no_grad():
            ids = hf.generate(**inputs, max_new_tokens=MAX_NEW, min_new_tokens=MAX_NEW,
                              do_sample=False)
        prompt = {"prompt": chat, **({"multi_modal_data": {"image": batch}} if batch else {})}
        out.append((prompt, inputs.input_ids[0].tolist(),
                    ids[0, inputs.input_ids.shape[1]:].tolist()))
    return out


@pytest.fixture(scope="module")
def llm(model_dir: str):  # type: ignore[no-untyped-def]
    from vllm import LLM

    engine = LLM(
        model=model_dir, dtype="float32", max_model_len=512, max_num_seqs=4,
        max_num_batched_tokens=64,  # prompts with images prefill in chunks
        kv_cache_memory_bytes=32 << 20, enable_prefix_caching=True, seed=0,
        limit_mm_per_prompt={"image": 2, "video": 0},
    )
    yield engine
    shut_down(engine)


def _generate(llm, prompts: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)
    return llm.generate(prompts, params, use_tqdm=False)


def test_the_language_model_runs_on_our_paged_backend_and_the_tower_on_our_ops(llm) -> None:  # type: ignore[no-untyped-def]
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.model_executor.layers.attention.mm_encoder_attention import MMEncoderAttention
    from vllm.model_executor.layers.rotary_embedding.mrope import MRotaryEmbedding

    from adapters.vllm.attention.backend import PagedAttentionBackend
    from adapters.vllm.layers.vision import AscendMMEncoderAttention, AscendMRotaryEmbedding

    model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    encoder = [m for m in model.modules() if isinstance(m, MMEncoderAttention)]
    assert encoder and all(m._forward_method.__func__ is AscendMMEncoderAttention.forward_oot
                           for m in encoder)
    rope = [m for m in model.modules() if isinstance(m, MRotaryEmbedding)]
    assert rope and all(type(m) is AscendMRotaryEmbedding for m in rope)
    decoder = [m for m in model.modules() if isinstance(m, Attention)]
    assert decoder and {m.attn_backend for m in decoder} == {PagedAttentionBackend}


def test_a_mixed_batch_twice_gives_transformers_ids(llm, requests_and_expected) -> None:  # type: ignore[no-untyped-def]
    prompts = [p for p, _, _ in requests_and_expected]
    for round_ in range(2):  # the second: prefix cache hits, multimodal caches warm
        outputs = _generate(llm, prompts)
        assert [o.prompt_token_ids for o in outputs] == [i for _, i, _ in requests_and_expected]
        got = [list(o.outputs[0].token_ids) for o in outputs]
        assert got == [e for _, _, e in requests_and_expected], round_


def test_the_doctors_encoder_cache_and_kv_are_what_the_engine_allocates(  # type: ignore[no-untyped-def]
    llm, model_dir: str
) -> None:
    """The doctor, asked about the engine's arguments, states the encoder budget vLLM's
    runner profiles with and its scheduler caches (tokens, items, bytes per token of the
    tower's output), and the KV bytes per token the worker's cache tensors hold."""
    from support.doctor_plan import doctor_memory

    memory = doctor_memory(model_dir, "float32", (
        "--max-num-seqs", "4", "--max-num-batched-tokens", "64",
        "--kv-cache-memory-bytes", str(32 << 20), "--enable-prefix-caching",
        "--limit-mm-per-prompt", '{"image": 2, "video": 0}'))
    encoder = memory["encoder"]
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    budget = runner.mm_budget
    assert encoder["max_tokens_per_item"] == dict(budget.mm_max_toks_per_item)
    assert (encoder["cache_tokens"], encoder["compute_tokens"]) == (
        budget.encoder_cache_size, budget.encoder_compute_budget)
    assert encoder["profile_items"] == budget.mm_max_items_per_batch[encoder["profile_modality"]]
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    assert scheduler.encoder_cache_manager.cache_size == encoder["cache_tokens"]

    # The profiling pass's batch: the tower's outputs (max tokens x the language model's
    # hidden per item) and its patches, which the doctor's activation estimate counts.
    from ascend_core.memory_budget import tower_bytes_per_patch

    modality, items = encoder["profile_modality"], encoder["profile_items"]
    dummy = runner._get_mm_dummy_batch(modality, items)
    with torch.no_grad():
        outs = runner.model.embed_multimodal(**dummy)
    assert [o.shape[0] for o in outs] == [encoder["max_tokens_per_item"][modality]] * items
    per_token = outs[0].element_size() * outs[0].shape[1]
    assert per_token == encoder["bytes_per_token"]
    assert encoder["cache_bytes"] == budget.encoder_cache_size * per_token
    patches = dummy["pixel_values"].shape[0]
    vision_hidden = runner.model.config.vision_config.hidden_size
    values = dummy["pixel_values"].shape[1]  # channels x frames x pixels of a patch
    assert encoder["activation_bytes"] == patches * tower_bytes_per_patch(
        vision_hidden, outs[0].element_size(), values)

    # KV: the worker's cache tensors hold the doctor's bytes per token for every slot.
    kv_config = runner.kv_cache_config
    held = sum(t.size for t in kv_config.kv_cache_tensors)
    slots = kv_config.num_blocks * runner.cache_config.block_size
    assert held == slots * memory["kv_bytes_per_token"], (held, slots, memory["kv_formula"])
