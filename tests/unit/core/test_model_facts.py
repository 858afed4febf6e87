"""config.json -> ModelFacts for the architectures served: Llama, Qwen, DeepSeek (MLA, DSA),
multimodal configs, and the numbers vLLM 0.33 derives when keys are missing."""

from __future__ import annotations

from typing import Any

import pytest

from ascend_core.errors import ConfigError
from ascend_core.model_facts import derived_max_len, model_dtype, model_facts_from_config

LLAMA3_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 131072,
    "rope_scaling": {
        "factor": 8.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "torch_dtype": "bfloat16",
}
QWEN3_0_6B: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 1024,
    "head_dim": 128,  # not 1024 / 16
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}
DEEPSEEK_V32: dict[str, Any] = {
    "architectures": ["DeepseekV32ForCausalLM"],
    "model_type": "deepseek_v32",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "n_routed_experts": 256,
    "index_topk": 2048,
    "max_position_embeddings": 163840,
    "rope_scaling": {
        "type": "yarn",
        "factor": 40,
        "original_max_position_embeddings": 4096,
    },
    "torch_dtype": "bfloat16",
}


def test_llama_is_gqa_with_head_dim_from_hidden_over_heads() -> None:
    facts = model_facts_from_config(LLAMA3_8B)
    assert (facts.architecture, facts.model_type) == ("LlamaForCausalLM", "llama")
    assert (facts.num_layers, facts.num_attention_heads, facts.num_kv_heads) == (32, 32, 8)
    assert (facts.head_size, facts.dtype) == (128, "bfloat16")
    assert facts.mla is None and not facts.use_sparse and not facts.is_moe
    assert facts.max_model_len == 131072  # llama3 scaling: already the stretched length


def test_qwen3_head_dim_is_read_not_derived() -> None:
    facts = model_facts_from_config(QWEN3_0_6B)
    assert (facts.head_size, facts.num_kv_heads, facts.max_model_len) == (128, 8, 40960)


def test_deepseek_v32_is_mla_with_sparse_attention_and_moe() -> None:
    facts = model_facts_from_config(DEEPSEEK_V32)
    assert facts.mla is not None
    assert (facts.mla.kv_lora_rank, facts.mla.qk_rope_head_dim) == (512, 64)
    assert facts.head_size == 576  # the latent plus the rope part, cached per token and layer
    assert facts.use_sparse and facts.index_topk == 2048
    assert facts.is_moe
    assert facts.max_model_len == 163840  # yarn: max_position_embeddings is already stretched

# DeepSeek-V4-Flash's published keys that decide its attention: no kv_lora_rank; one shared
# KV head of head_dim, rope on its last qk_rope_head_dim channels, windows and compression.
DEEPSEEK_V4: dict[str, Any] = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "hidden_size": 4096,
    "num_hidden_layers": 43,
    "num_attention_heads": 64,
    "num_key_value_heads": 1,
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "n_routed_experts": 256,
    "index_topk": 512,
    "sliding_window": 128,
    "compress_ratios": [0, 0, 4, 128],
    "max_position_embeddings": 1048576,
    "torch_dtype": "bfloat16",
}


def test_deepseek_v4_is_compressed_mla_over_its_one_kv_head() -> None:
    facts = model_facts_from_config(DEEPSEEK_V4)
    assert facts.mla is not None  # vLLM counts V4 as MLA (is_deepseek_mla)
    assert (facts.mla.kv_lora_rank, facts.mla.qk_rope_head_dim) == (448, 64)
    assert facts.head_size == 512
    assert facts.compressed_attention and facts.use_sparse and facts.index_topk == 512
    # transformers' configs give the rotary part as a fraction of the head instead.
    tiny = {**DEEPSEEK_V4, "head_dim": 64, "partial_rotary_factor": 0.25}
    del tiny["qk_rope_head_dim"]
    assert model_facts_from_config(tiny).mla.qk_rope_head_dim == 16  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="head_dim 64"):
        model_facts_from_config({**DEEPSEEK_V4, "head_dim": 64})
    # Another architecture without kv_lora_rank is not MLA for its head_dim.
    assert model_facts_from_config({**DEEPSEEK_V4, "architectures": ["X"]}).mla is None


def test_multimodal_config_reads_the_nested_text_config() -> None:
    config = {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        "text_config": {
            "hidden_size": 2048,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "num_hidden_layers": 36,
            "max_position_embeddings": 128000,
        },
        "vision_config": {"hidden_size": 1280, "num_hidden_layers": 32},
    }
    facts = model_facts_from_config(config)
    assert facts.architecture == "Qwen2_5_VLForConditionalGeneration"
    assert (facts.num_layers, facts.num_kv_heads, facts.head_size) == (36, 2, 128)
    assert facts.max_model_len == 128000



def test_a_null_architectures_in_text_config_leaves_the_outer_one() -> None:
    # transformers' Qwen2.5-VL / Qwen3-VL config.json carries text_config.architectures: null;
    # the refusals and the doctor must still name the model's class, not "unknown".
    config = {
        "architectures": ["Qwen3VLForConditionalGeneration"],
        "text_config": {"architectures": None, "hidden_size": 128, "num_attention_heads": 4,
                        "num_hidden_layers": 2},
        "vision_config": {"depth": 2},
    }
    facts = model_facts_from_config(config)
    assert facts.architecture == "Qwen3VLForConditionalGeneration"
    assert facts.multimodal

def test_kv_heads_default_to_heads_and_follow_other_families_keys() -> None:
    base = {"hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 2}
    assert model_facts_from_config(base).num_kv_heads == 8
    assert model_facts_from_config({**base, "multi_query_group_num": 2}).num_kv_heads == 2
    assert model_facts_from_config({**base, "num_local_experts": 8}).is_moe


def test_arguments_win_over_the_config() -> None:
    facts = model_facts_from_config(LLAMA3_8B, dtype="half", max_model_len=8192)
    assert (facts.dtype, facts.max_model_len) == ("float16", 8192)


def test_dtype_rules() -> None:
    assert model_dtype({"torch_dtype": "float32"}) == "bfloat16"
    assert model_dtype({"dtype": "torch.float16"}) == "float16"
    assert model_dtype({}) == "bfloat16"
    assert model_dtype({"torch_dtype": "bfloat16"}, "float32") == "float32"


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({}, 2048),  # vLLM's default when no length key is present
        ({"max_position_embeddings": 4096, "seq_length": 2048}, 2048),  # the smallest
        ({"max_position_embeddings": 4096, "model_max_length": 8192}, 8192),  # stated outright
        ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2}}, 8192),
        ({"max_position_embeddings": 4096, "rope_scaling": {"type": "dynamic", "factor": 2}}, 8192),
        ({"max_position_embeddings": 32768, "rope_scaling": {"type": "yarn", "factor": 4}}, 32768),
        ({"max_position_embeddings": 4096, "rope_parameters": {"rope_type": "default"}}, 4096),
    ],
)
def test_derived_max_len(config: dict[str, Any], expected: int) -> None:
    assert derived_max_len(config) == expected


def test_a_missing_key_names_the_source_and_the_key() -> None:
    with pytest.raises(ConfigError, match=r"/m/config.json: num_hidden_layers is None"):
        model_facts_from_config({"hidden_size": 256, "num_attention_heads": 4}, "/m/config.json")


def test_a_bool_is_not_a_count() -> None:
    with pytest.raises(ConfigError, match=r"num_attention_heads is True"):
        model_facts_from_config(
            {"hidden_size": 8, "num_attention_heads": True, "num_hidden_layers": 1}
        )


def test_heads_larger_than_hidden_without_head_dim_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="smaller than num_attention_heads"):
        model_facts_from_config(
            {"hidden_size": 4, "num_attention_heads": 8, "num_hidden_layers": 1}
        )


def _cfg(**extra):  # type: ignore[no-untyped-def]
    base = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
    }
    return {**base, **extra}


def test_support_matrix_features_are_read_from_config_json() -> None:
    plain = model_facts_from_config(_cfg())
    assert not (plain.sliding_window or plain.hybrid or plain.multimodal or plain.encoder_decoder)
    # Qwen2 writes a window but turns it off with use_sliding_window=false.
    assert not model_facts_from_config(
        _cfg(sliding_window=4096, use_sliding_window=False)
    ).sliding_window
    assert model_facts_from_config(_cfg(sliding_window=4096)).sliding_window
    assert model_facts_from_config(
        _cfg(layer_types=["sliding_attention", "full_attention"])
    ).sliding_window
    assert model_facts_from_config(_cfg(layer_types=["linear_attention", "full_attention"])).hybrid
    vision = model_facts_from_config(_cfg(vision_config={"depth": 2}))
    assert (vision.vision, vision.video, vision.audio) == (True, False, False)
    qwen_vl = model_facts_from_config(_cfg(vision_config={"depth": 2}, video_token_id=7))
    assert (qwen_vl.vision, qwen_vl.video, qwen_vl.audio) == (True, True, False)
    audio = model_facts_from_config(_cfg(audio_config={"d_model": 8}))
    assert (audio.vision, audio.video, audio.audio) == (False, False, True)
    omni = model_facts_from_config(
        _cfg(thinker_config={"vision_config": {}, "audio_config": {}, "video_token_id": 3})
    )
    assert (omni.vision, omni.video, omni.audio) == (True, True, True)
    assert omni.multimodal and not plain.multimodal
    assert model_facts_from_config(_cfg(is_encoder_decoder=True)).encoder_decoder
    assert model_facts_from_config(_cfg(architectures=["GptOssForCausalLM"])).attention_sinks
