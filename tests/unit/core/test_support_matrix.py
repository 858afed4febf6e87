"""The support matrix: every feature has a verdict per device, and the plan refuses first."""

from __future__ import annotations

import attrs
import pytest

from ascend_core.deployment import SpeculativeSettings
from ascend_core.errors import UnsupportedFeatureError
from ascend_core.plan import plan_config
from ascend_core.support import MATRIX, Feature, Refused, features_of, refusals, verdict
from ascend_core.support.features import speculative_feature
from ports.device import DeviceKind
from unit.core.plan_fixtures import dense_model, host, mla_model, npu

DEVICES = (DeviceKind.CPU, DeviceKind.NPU)

# ModelFacts flag -> the feature it turns on.
MODEL_FLAGS = {
    "hybrid": Feature.HYBRID,
    "encoder_decoder": Feature.ENCODER_DECODER,
    "vision": Feature.VISION,
    "video": Feature.VIDEO,
    "audio": Feature.AUDIO,
}


@pytest.mark.parametrize("feature", list(Feature))
@pytest.mark.parametrize("device", DEVICES)
def test_every_feature_has_an_explicit_verdict_with_reasons(feature: Feature, device) -> None:
    assert (feature, device) in MATRIX
    v = verdict(feature, device)
    if isinstance(v, Refused):
        assert len(v.reason) > 20 and len(v.instead) > 10


def test_a_dense_model_uses_no_listed_feature_and_plans_on_both_devices() -> None:
    for deployment in (host(), npu()):
        assert features_of(deployment) == ()
        assert plan_config(deployment).ok


@pytest.mark.parametrize("place", [host, npu])
def test_sliding_windows_and_sinks_plan_on_both_devices(place) -> None:  # type: ignore[no-untyped-def]
    """gpt-oss's window and sinks are served by the paged backend on both devices."""
    deployment = place(dense_model(sliding_window=True, attention_sinks=True))
    assert set(features_of(deployment)) == {Feature.SLIDING_WINDOW, Feature.ATTENTION_SINKS}
    assert plan_config(deployment).ok


@pytest.mark.parametrize(("flag", "feature"), MODEL_FLAGS.items())
@pytest.mark.parametrize("place", [host, npu])
def test_each_model_feature_is_refused_with_its_name_device_and_alternative(
    flag: str, feature: Feature, place
) -> None:
    deployment = place(dense_model(**{flag: True}))
    assert features_of(deployment) == (feature,)
    if not isinstance(verdict(feature, deployment.device_kind), Refused):
        assert refusals(deployment) == ()  # served there (images on the host)
        return
    plan = plan_config(deployment)
    error = plan.errors[0]  # the matrix speaks first
    assert isinstance(error, UnsupportedFeatureError)
    assert (error.feature, error.device) == (feature.name, deployment.device_kind.value)
    assert feature.value in error.what and "Qwen3ForCausalLM" in error.what
    where = "the host device" if deployment.device_kind is DeviceKind.CPU else "an Ascend NPU"
    assert where in error.what
    assert error.hint == verdict(feature, deployment.device_kind).instead + "."


def test_mla_dsa_and_compressed_mla_are_told_apart() -> None:
    assert features_of(host(mla_model(is_moe=False))) == (Feature.MLA,)
    dsa = mla_model(is_moe=False, index_topk=2048)
    assert features_of(npu(dsa)) == (Feature.SPARSE_MLA,)
    compressed = mla_model(is_moe=False, compressed_attention=True, index_topk=512)
    assert features_of(npu(compressed)) == (Feature.COMPRESSED_MLA,)
    # DeepSeek-V3: MLA and MoE, both served on both devices (the NPU's shape limits are
    # op_limits' business).
    assert features_of(npu(mla_model())) == (Feature.MLA, Feature.MOE)


@pytest.mark.parametrize("place", [host, npu])
def test_mla_and_moe_are_served_on_both_devices(place) -> None:  # type: ignore[no-untyped-def]
    assert refusals(place(mla_model())) == ()
    assert refusals(place(dense_model(is_moe=True))) == ()


@pytest.mark.parametrize("place", [host, npu])
def test_a_modelslim_moe_export_uses_quantized_experts_served_on_both_devices(place) -> None:  # type: ignore[no-untyped-def]
    from ascend_core.quantization import QuantMethod

    exported = place(dense_model(is_moe=True), detected_quantization=QuantMethod.ASCEND)
    assert features_of(exported) == (Feature.MOE, Feature.QUANTIZED_MOE)
    assert refusals(exported) == ()
    # A dense ModelSlim export, or a MoE model served float, has no quantized experts.
    assert features_of(place(dense_model(), detected_quantization=QuantMethod.ASCEND)) == ()
    assert features_of(place(dense_model(is_moe=True))) == (Feature.MOE,)


def test_compressed_mla_serves_on_both_devices() -> None:
    """DeepSeek-V4: the plugin's own class on the host and on the NPU (its ports there)."""
    model = mla_model(compressed_attention=True, index_topk=512)
    assert refusals(host(model)) == ()
    assert refusals(npu(model)) == ()
    assert "npu_lightning_indexer" in MATRIX[(Feature.COMPRESSED_MLA, DeviceKind.NPU)].note


@pytest.mark.parametrize("place", [host, npu])
def test_sparse_mla_serves_on_both_devices_with_its_reason(place) -> None:  # type: ignore[no-untyped-def]
    """DeepSeek-V3.2 (DSA): the sparse MLA backend; the verdict says how."""
    model = mla_model(index_topk=2048)
    assert [e.feature for e in refusals(place(model))] == []
    assert Feature.SPARSE_MLA in features_of(place(model))
    kind = DeviceKind.CPU if place is host else DeviceKind.NPU
    assert "indexer" in MATRIX[(Feature.SPARSE_MLA, kind)].note


@pytest.mark.parametrize(
    ("method", "feature"),
    [
        ("ngram", Feature.SPEC_NGRAM),
        ("suffix", Feature.SPEC_SUFFIX),
        ("medusa", Feature.SPEC_MEDUSA),
        ("eagle3", Feature.SPEC_EAGLE3),
        ("deepseek_mtp", Feature.SPEC_MTP),
        ("MTP", Feature.SPEC_MTP),
        ("something_new", Feature.SPEC_OTHER),
    ],
)
def test_speculative_methods_map_to_features(method: str, feature: Feature) -> None:
    assert speculative_feature(method) is feature
    deployment = attrs.evolve(
        npu(), speculative=SpeculativeSettings(method=method, num_speculative_tokens=2)
    )
    assert features_of(deployment) == (feature,)
    served = feature in (
        Feature.SPEC_NGRAM, Feature.SPEC_SUFFIX, Feature.SPEC_EAGLE3, Feature.SPEC_MTP
    )
    assert [e.feature for e in refusals(deployment)] == ([] if served else [feature.name])


def test_lora_and_sleep_mode_are_deployment_features() -> None:
    assert features_of(attrs.evolve(npu(), lora=True)) == (Feature.LORA,)
    assert features_of(attrs.evolve(npu(), lora=False, user_quantization="fp8")) == ()
    assert features_of(npu(cache={"enable_sleep_mode": True})) == (Feature.SLEEP_MODE,)


@pytest.mark.parametrize("place", [host, npu])
def test_lora_is_served_on_dense_models_and_refused_on_quantized_layers_and_moe(place) -> None:  # type: ignore[no-untyped-def]
    dense = attrs.evolve(place(), lora=True)
    assert features_of(dense) == (Feature.LORA,) and refusals(dense) == ()
    quantized = attrs.evolve(dense, user_quantization="compressed-tensors")
    assert features_of(quantized) == (Feature.LORA, Feature.LORA_QUANTIZED)
    moe = attrs.evolve(place(dense_model(is_moe=True)), lora=True)
    assert features_of(moe) == (Feature.MOE, Feature.LORA, Feature.LORA_MOE)
    for deployment, feature in ((quantized, Feature.LORA_QUANTIZED), (moe, Feature.LORA_MOE)):
        (error,) = refusals(deployment)
        assert error.feature == feature.name and "merge_and_unload" in str(error)
        assert plan_config(deployment).errors[0].feature == feature.name  # the matrix first


@pytest.mark.parametrize("place", [host, npu])
def test_a_qwen_vl_model_uses_its_towers_until_their_inputs_are_turned_off(place) -> None:  # type: ignore[no-untyped-def]
    """--limit-mm-per-prompt 0 for a modality, or --language-model-only (all of them),
    leaves its tower idle: the matrix no longer judges it."""
    model = dense_model(vision=True, video=True)
    assert features_of(place(model)) == (Feature.VISION, Feature.VIDEO)
    no_video = place(model, mm_off={"video"})
    assert features_of(no_video) == (Feature.VISION,)
    # Images are served on both devices (the engine tests: test_qwen_vl_generate.py on the
    # host, test_vision_on_emulated_npu.py on the emulated NPU).
    assert [e.feature for e in refusals(no_video)] == []
    assert features_of(place(model, mm_off={"image"})) == (Feature.VISION, Feature.VIDEO)
    assert features_of(place(model, mm_off={"image", "video"})) == ()
    assert features_of(place(dense_model(audio=True), mm_off={"image", "video"})) == (
        Feature.AUDIO,
    )
    assert features_of(place(dense_model(audio=True), mm_off={"audio"})) == ()
    assert plan_config(place(model, mm_off={"image", "video", "audio"})).ok
    # Each refusal says how to turn its tower off.
    hints = {e.feature: e.hint for e in refusals(npu(dense_model(vision=True, video=True,
                                                                 audio=True)))}
    assert "VISION" not in hints
    assert '"video": 0' in hints["VIDEO"] and '"audio": 0' in hints["AUDIO"]
