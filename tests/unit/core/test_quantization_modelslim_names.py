"""ModelSlim exports the reference plugin reads: key aliases, renamed prefixes, k == v."""

from __future__ import annotations

import pytest

from ascend_core.errors import QuantizationError
from ascend_core.quantization import QuantScheme, parse_description, scheme_for_layer
from ascend_core.quantization.modelslim_names import candidate_prefixes, k_eq_v_from_config

ATTN = "model.layers.0.self_attn"


def test_weight_packed_reads_as_weight():
    """vllm_ascend/quantization/modelslim_config.py AscendModelSlimConfig.__init__ and
    _apply_extra_quant_adaptations: a `weight_packed` key is also read as `weight`."""
    d = parse_description({f"{ATTN}.o_proj.weight_packed": "W4A8_DYNAMIC"})
    assert scheme_for_layer(d, f"{ATTN}.o_proj").scheme is QuantScheme.W4A8_DYNAMIC


def test_shared_head_prefix_of_mtp_layers_is_dropped():
    """Same adaptation: `.shared_head.` keys (DeepSeek MTP) are also read without it."""
    d = parse_description({"model.layers.61.shared_head.head.weight": "FLOAT"})
    assert scheme_for_layer(d, "model.layers.61.head").scheme is QuantScheme.FLOAT


def test_an_alias_that_contradicts_a_written_key_is_an_error():
    """The reference lets the alias overwrite silently; here the file is refused."""
    with pytest.raises(QuantizationError) as err:
        parse_description(
            {f"{ATTN}.o_proj.weight_packed": "W4A8_DYNAMIC", f"{ATTN}.o_proj.weight": "W8A8"}
        )
    assert "weight_packed" in err.value.what and "W8A8" in err.value.what


def test_an_alias_agreeing_with_a_written_key_is_fine():
    d = parse_description({f"{ATTN}.o_proj.weight_packed": "W8A8", f"{ATTN}.o_proj.weight": "W8A8"})
    assert scheme_for_layer(d, f"{ATTN}.o_proj").scheme is QuantScheme.W8A8


def test_vision_language_lm_head_is_found_under_language_model():
    """modelslim_config.py QUANT_MODEL_PREFIX_MAPPINGS (e.g. qwen2_5_omni_thinker:
    lm_head. -> language_model.lm_head.) and get_quant_method's language_model handling."""
    d = parse_description({"language_model.lm_head.weight": "W8A8"})
    assert scheme_for_layer(d, "lm_head").scheme is QuantScheme.W8A8
    assert scheme_for_layer(d, "lm_head", model_type="qwen2_5_omni_thinker").weights == (
        "language_model.lm_head.weight",
    )


def test_a_per_model_prefix_mapping_is_applied():
    """QUANT_MODEL_PREFIX_MAPPINGS["qwen3_vl_moe"]: visual. -> model.visual."""
    d = parse_description({"model.visual.blocks.0.attn.proj.weight": "W8A8_DYNAMIC"})
    scheme = scheme_for_layer(d, "visual.blocks.0.attn.proj", model_type="qwen3_vl_moe")
    assert scheme.scheme is QuantScheme.W8A8_DYNAMIC
    assert scheme.prefix == "visual.blocks.0.attn.proj"
    with pytest.raises(QuantizationError):
        scheme_for_layer(d, "visual.blocks.0.attn.proj")  # no model type: no mapping


def test_candidate_prefixes_are_ordered_most_direct_first():
    assert candidate_prefixes("lm_head", None) == ("lm_head", "language_model.lm_head")
    assert candidate_prefixes("language_model.model.x", None)[:2] == (
        "language_model.model.x",
        "model.x",
    )
    assert candidate_prefixes("language_model.model.x", "kimi_k2") == ("language_model.model.x",)


def test_two_names_of_one_layer_with_different_schemes_are_an_error():
    d = parse_description({"lm_head.weight": "W8A8", "language_model.lm_head.weight": "FLOAT"})
    with pytest.raises(QuantizationError) as err:
        scheme_for_layer(d, "lm_head")
    assert "more than once" in err.value.what


def test_k_eq_v_models_have_no_v_proj_entry():
    """Models whose full-attention layers share one tensor for k and v (config
    attention_k_eq_v, e.g. Gemma 4) export q_proj and k_proj only."""
    d = parse_description({f"{ATTN}.q_proj.weight": "W8A8", f"{ATTN}.k_proj.weight": "W8A8"})
    scheme = scheme_for_layer(d, f"{ATTN}.qkv_proj", k_eq_v=True)
    assert scheme.scheme is QuantScheme.W8A8
    assert scheme.weights == (f"{ATTN}.q_proj.weight", f"{ATTN}.k_proj.weight")
    with pytest.raises(QuantizationError) as err:
        scheme_for_layer(d, f"{ATTN}.qkv_proj")
    assert "v_proj" in err.value.what and "k_eq_v" in err.value.hint


def test_k_eq_v_still_uses_a_v_proj_entry_when_one_is_written():
    d = parse_description(
        {
            f"{ATTN}.q_proj.weight": "W8A8",
            f"{ATTN}.k_proj.weight": "W8A8",
            f"{ATTN}.v_proj.weight": "W8A8",
        }
    )
    assert len(scheme_for_layer(d, f"{ATTN}.qkv_proj", k_eq_v=True).weights) == 3


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"attention_k_eq_v": True}, True),
        ({"text_config": {"attention_k_eq_v": True}}, True),
        ({"attention_k_eq_v": False}, False),
        ({}, False),
        (None, False),
    ],
)
def test_k_eq_v_from_config(config, expected):
    assert k_eq_v_from_config(config) is expected


def test_mla_fused_qkv_a_proj_takes_its_shards_scheme():
    """modelslim_config.py packed_modules_model_mapping (deepseek_v3 and the MLA family):
    fused_qkv_a_proj = q_a_proj + kv_a_proj_with_mqa."""
    d = parse_description(
        {f"{ATTN}.q_a_proj.weight": "W8A8", f"{ATTN}.kv_a_proj_with_mqa.weight": "W8A8"}
    )
    assert scheme_for_layer(d, f"{ATTN}.fused_qkv_a_proj").scheme is QuantScheme.W8A8
