"""ModelSlim description: per-layer scheme lookup, fused layers, and errors."""

from __future__ import annotations

import pytest

from ascend_core.errors import QuantizationError
from ascend_core.quantization import (
    LayerScheme,
    ModelSlimDescription,
    QuantScheme,
    parse_description,
    scheme_for_layer,
)

L0 = "model.layers.0"


def description(**schemes: str) -> ModelSlimDescription:
    """Entries from `q_proj="W8A8"` style keywords, under layer 0."""
    entries: dict[str, object] = {"model_quant_type": "W8A8_DYNAMIC", "version": "1.0.0"}
    for name, label in schemes.items():
        module = "self_attn" if name in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
        entries[f"{L0}.{module}.{name}.weight"] = label
    return parse_description(entries)


def test_plain_layer_takes_its_scheme_and_names_the_key() -> None:
    d = description(o_proj="W8A8_DYNAMIC")
    result = scheme_for_layer(d, f"{L0}.self_attn.o_proj")
    assert result == LayerScheme(
        f"{L0}.self_attn.o_proj", QuantScheme.W8A8_DYNAMIC, (f"{L0}.self_attn.o_proj.weight",)
    )
    assert result.quantized


@pytest.mark.parametrize("label", ["W8A8", "W8A8_DYNAMIC", "W4A8_DYNAMIC", "W8A16", "FLOAT"])
def test_every_served_scheme_label_parses(label: str) -> None:
    d = description(down_proj=label)
    assert scheme_for_layer(d, f"{L0}.mlp.down_proj").scheme is QuantScheme(label)


def test_float_means_not_quantized() -> None:
    d = description(down_proj="FLOAT")
    assert not scheme_for_layer(d, f"{L0}.mlp.down_proj").quantized


def test_lowercase_label_is_accepted() -> None:
    d = description(down_proj="w8a8")
    assert scheme_for_layer(d, f"{L0}.mlp.down_proj").scheme is QuantScheme.W8A8


def test_fused_qkv_takes_the_scheme_its_shards_agree_on() -> None:
    d = description(q_proj="W8A8", k_proj="W8A8", v_proj="W8A8")
    result = scheme_for_layer(d, f"{L0}.self_attn.qkv_proj")
    assert result.scheme is QuantScheme.W8A8
    assert result.weights == tuple(
        f"{L0}.self_attn.{s}.weight" for s in ("q_proj", "k_proj", "v_proj")
    )


def test_fused_gate_up_agreeing_on_float_is_not_quantized() -> None:
    d = description(gate_proj="FLOAT", up_proj="FLOAT")
    assert not scheme_for_layer(d, f"{L0}.mlp.gate_up_proj").quantized


def test_disagreeing_shards_are_an_error_naming_layer_and_shards() -> None:
    d = description(q_proj="W8A8", k_proj="W8A8", v_proj="FLOAT")
    with pytest.raises(QuantizationError) as info:
        scheme_for_layer(d, f"{L0}.self_attn.qkv_proj")
    what = info.value.what
    assert f"{L0}.self_attn.qkv_proj" in what
    assert "q_proj=W8A8" in what and "v_proj=FLOAT" in what
    assert "ModelSlim" in info.value.hint


def test_missing_shard_is_an_error_naming_it() -> None:
    d = description(gate_proj="W8A8")
    with pytest.raises(QuantizationError) as info:
        scheme_for_layer(d, f"{L0}.mlp.gate_up_proj")
    assert f"{L0}.mlp.up_proj.weight" in info.value.what


def test_layer_missing_from_description_is_an_error_naming_it() -> None:
    d = description(o_proj="W8A8")
    with pytest.raises(QuantizationError) as info:
        scheme_for_layer(d, "model.layers.7.self_attn.o_proj")
    assert "model.layers.7.self_attn.o_proj.weight" in info.value.what
    assert "Did you mean" in info.value.hint


def test_unserved_scheme_is_an_error_with_did_you_mean() -> None:
    d = description(down_proj="W8A8_DYNAMC")
    with pytest.raises(QuantizationError) as info:
        scheme_for_layer(d, f"{L0}.mlp.down_proj")
    assert "W8A8_DYNAMC" in info.value.what
    assert "Did you mean 'W8A8_DYNAMIC'?" in info.value.hint


def test_a_directly_named_fused_weight_wins_over_its_shards() -> None:
    # Models such as Phi-3 store qkv_proj as one weight.
    d = parse_description({f"{L0}.self_attn.qkv_proj.weight": "W8A16"})
    assert scheme_for_layer(d, f"{L0}.self_attn.qkv_proj").scheme is QuantScheme.W8A16


def test_custom_fused_shards() -> None:
    d = parse_description({"m.a.weight": "W8A8", "m.b.weight": "W8A8"})
    assert scheme_for_layer(d, "m.ab", {"ab": ("a", "b")}).scheme is QuantScheme.W8A8


def test_parse_keeps_string_entries_and_reads_global_keys() -> None:
    d = parse_description({"model_quant_type": "W8A8", "group_size": 128, "x.weight": "FLOAT"})
    assert d.model_quant_type == "W8A8"
    assert d.model_scheme is QuantScheme.W8A8
    assert d.version is None
    assert "group_size" not in d.entries
    assert d.entries["x.weight"] == "FLOAT"


def test_unknown_model_quant_type_is_kept_but_has_no_scheme() -> None:
    d = parse_description({"model_quant_type": "W8A8_MIX"})
    assert d.model_quant_type == "W8A8_MIX"
    assert d.model_scheme is None


def test_entries_are_read_only() -> None:
    d = parse_description({"x.weight": "FLOAT"})
    with pytest.raises(TypeError):
        d.entries["x.weight"] = "W8A8"  # type: ignore[index]
