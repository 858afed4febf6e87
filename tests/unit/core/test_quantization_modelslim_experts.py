"""ModelSlim description: the one scheme of a MoE layer's experts, and its errors."""

from __future__ import annotations

import pytest

from ascend_core.errors import QuantizationError
from ascend_core.quantization import QuantScheme, parse_description
from ascend_core.quantization.modelslim_experts import expert_weight_keys, scheme_for_experts

PREFIX = "model.layers.1.mlp.experts"
EXPERTS = 4


def _entries(label: str = "W8A8_DYNAMIC") -> dict[str, str]:
    entries = {"model_quant_type": "W8A8_DYNAMIC", "model.layers.1.mlp.gate.weight": "FLOAT"}
    for key in expert_weight_keys(PREFIX, EXPERTS):
        entries[key] = label
        entries[key.replace(".weight", ".weight_scale")] = label
    return entries


@pytest.mark.parametrize("label", ["W8A8_DYNAMIC", "FLOAT"])
def test_experts_of_one_scheme_take_it(label: str) -> None:
    found = scheme_for_experts(parse_description(_entries(label)), PREFIX, EXPERTS)
    assert found.scheme is QuantScheme(label) and found.prefix == PREFIX
    assert found.weights[:3] == tuple(f"{PREFIX}.0.{p}.weight"
                                      for p in ("gate_proj", "up_proj", "down_proj"))
    assert len(found.weights) == 3 * EXPERTS


def test_a_missing_expert_entry_is_named() -> None:
    entries = _entries()
    del entries[f"{PREFIX}.2.up_proj.weight"]
    with pytest.raises(QuantizationError) as caught:
        scheme_for_experts(parse_description(entries), PREFIX, EXPERTS)
    assert (f"MoE layer {PREFIX}: quant_model_description.json has no entry "
            f"{PREFIX}.2.up_proj.weight; each of its 4 experts needs an entry for "
            "gate_proj, up_proj, down_proj") in caught.value.what


def test_experts_of_different_schemes_are_refused_naming_both() -> None:
    entries = _entries()
    entries[f"{PREFIX}.3.down_proj.weight"] = "FLOAT"
    with pytest.raises(QuantizationError) as caught:
        scheme_for_experts(parse_description(entries), PREFIX, EXPERTS)
    assert (f"({PREFIX}.0.gate_proj.weight=W8A8_DYNAMIC, {PREFIX}.3.down_proj.weight=FLOAT)"
            in caught.value.what)
    assert "one scheme for every expert weight" in caught.value.hint


def test_static_w8a8_experts_are_refused() -> None:
    with pytest.raises(QuantizationError) as caught:
        scheme_for_experts(parse_description(_entries("W8A8")), PREFIX, EXPERTS)
    assert "its experts are W8A8" in caught.value.what
    assert "served as W8A8_DYNAMIC, W4A8_DYNAMIC or FLOAT only" in caught.value.what


def test_the_checkpoints_projection_names_are_used() -> None:
    names = ("w1", "w3", "w2")
    entries = {f"{PREFIX}.{e}.{p}.weight": "W8A8_DYNAMIC" for e in range(2) for p in names}
    found = scheme_for_experts(parse_description(entries), PREFIX, 2, names)
    assert found.scheme is QuantScheme.W8A8_DYNAMIC


def test_w4a8_experts_are_served_per_channel_and_refused_per_group() -> None:
    found = scheme_for_experts(parse_description(_entries("W4A8_DYNAMIC")), PREFIX, EXPERTS)
    assert found.scheme is QuantScheme.W4A8_DYNAMIC
    grouped = parse_description({**_entries("W4A8_DYNAMIC"), "group_size": 256})
    assert grouped.group_size == 256
    with pytest.raises(QuantizationError) as caught:
        scheme_for_experts(grouped, PREFIX, EXPERTS)
    assert "per-group weight scales (group_size 256" in caught.value.what
    assert "vllm-project/vllm-ascend no longer serves per-group W4A8 experts" in caught.value.what
    assert "per-channel W4A8_DYNAMIC (group_size 0)" in caught.value.hint
