"""config.json -> ModelFacts, for the architectures the doctor plans."""

from __future__ import annotations

import pytest

from adapters.doctor.model_config import derived_max_len, model_dtype, model_facts
from ascend_core.errors import ConfigError
from unit.doctor.large_models import DEEPSEEK_V3_CONFIG, LLAMA_70B_CONFIG


def test_llama_70b_is_gqa() -> None:
    facts = model_facts(LLAMA_70B_CONFIG, "/m")
    assert (facts.num_layers, facts.num_attention_heads, facts.num_kv_heads) == (80, 64, 8)
    assert (facts.head_size, facts.hidden_size, facts.dtype) == (128, 8192, "bfloat16")
    assert facts.mla is None and not facts.is_moe
    assert facts.max_model_len == 131072  # llama3 rope scaling does not stretch it


def test_deepseek_v3_is_mla_moe_with_a_yarn_stretched_context() -> None:
    facts = model_facts(DEEPSEEK_V3_CONFIG, "/m")
    assert facts.mla is not None
    assert (facts.mla.kv_lora_rank, facts.mla.qk_rope_head_dim) == (512, 64)
    assert facts.head_size == 576  # what MLA caches per token and layer
    assert facts.is_moe
    assert facts.max_model_len == 4096 * 40


def test_max_model_len_argument_wins() -> None:
    assert model_facts(LLAMA_70B_CONFIG, "/m", max_model_len=8192).max_model_len == 8192


def test_dtype_rules() -> None:
    assert model_dtype({"torch_dtype": "float32"}, "auto") == "bfloat16"
    assert model_dtype({"dtype": "float16"}, "auto") == "float16"
    assert model_dtype({}, "half") == "float16"
    assert model_dtype({"torch_dtype": "bfloat16"}, "float32") == "float32"


def test_head_dim_defaults_to_hidden_over_heads_and_kv_heads_to_heads() -> None:
    facts = model_facts(
        {"hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 2}, "/m"
    )
    assert (facts.head_size, facts.num_kv_heads) == (64, 8)


def test_text_config_of_a_multimodal_model_is_used() -> None:
    config = {
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "text_config": {"hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 3},
    }
    assert model_facts(config, "/m").num_layers == 3


def test_a_missing_key_names_the_file_and_key() -> None:
    with pytest.raises(ConfigError, match=r"/m/config.json: num_hidden_layers is None"):
        model_facts({"hidden_size": 256, "num_attention_heads": 4}, "/m")


def test_dynamic_rope_scaling_stretches_the_context() -> None:
    config = {"max_position_embeddings": 4096, "rope_scaling": {"type": "dynamic", "factor": 2}}
    assert derived_max_len(config) == 8192
