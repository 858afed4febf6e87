"""The quantization support table: what each export holds, by format and layer kind, and
the plan's refusal (naming the layer, the scheme and what would serve it) before load."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from ascend_core.plan import plan_config
from ascend_core.quantization import QuantMethod
from ascend_core.quantization.export_layers import (
    LayerKind,
    QuantFormat,
    QuantizedLayers,
    compressed_tensors_layers,
    fp8_layers,
    modelslim_layers,
    quantized_layers,
)
from ascend_core.support.matrix import Refused, Supported
from ascend_core.support.quant_matrix import QUANT_MATRIX, quant_refusals, quant_verdict
from ports.device import DeviceKind
from unit.core.plan_fixtures import host, npu

DEVICES = (DeviceKind.CPU, DeviceKind.NPU)
SERVED = {
    (QuantFormat.MODELSLIM_W8A8, LayerKind.LINEAR),
    (QuantFormat.MODELSLIM_W8A8_DYNAMIC, LayerKind.LINEAR),
    (QuantFormat.MODELSLIM_W8A8_DYNAMIC, LayerKind.EXPERTS),
    (QuantFormat.MODELSLIM_W4A8_DYNAMIC, LayerKind.LINEAR),
    (QuantFormat.MODELSLIM_W4A8_DYNAMIC, LayerKind.EXPERTS),
    (QuantFormat.MODELSLIM_W8A16, LayerKind.LINEAR),
    (QuantFormat.CT_INT8_W8A8, LayerKind.LINEAR),
    (QuantFormat.CT_W4A16, LayerKind.LINEAR),
    (QuantFormat.CT_W4A16, LayerKind.EXPERTS),
    (QuantFormat.CT_FP8_CHANNEL, LayerKind.LINEAR),
    (QuantFormat.CT_FP8_BLOCK, LayerKind.LINEAR),
    (QuantFormat.CT_FP8_CHANNEL, LayerKind.EXPERTS),
    (QuantFormat.CT_FP8_BLOCK, LayerKind.EXPERTS),
    (QuantFormat.FP8_BLOCK, LayerKind.LINEAR),
    (QuantFormat.FP8_BLOCK, LayerKind.EXPERTS),
}


@pytest.mark.parametrize("fmt", list(QuantFormat))
@pytest.mark.parametrize("kind", list(LayerKind))
@pytest.mark.parametrize("device", DEVICES)
def test_every_combination_has_an_explicit_verdict(fmt, kind, device) -> None:  # type: ignore[no-untyped-def]
    assert (fmt, kind, device) in QUANT_MATRIX
    v = quant_verdict(fmt, kind, device)
    assert isinstance(v, Supported) == ((fmt, kind) in SERVED)
    if isinstance(v, Refused):
        assert len(v.reason) > 20 and len(v.instead) > 20


DESCRIPTION = {
    "model_quant_type": "W8A16",
    "model.embed_tokens.weight": "FLOAT",
    "model.layers.0.self_attn.q_proj.weight": "W8A16",
    "model.layers.0.self_attn.k_proj.weight": "W8A16",
    "model.layers.0.self_attn.o_proj.weight": "W4A8_DYNAMIC",
    # A per-group export's second-level scale (no group_size in the description).
    "model.layers.0.self_attn.o_proj.weight_scale_second": "W4A8_DYNAMIC",
    "model.layers.0.mlp.experts.0.gate_proj.weight": "W4A8_DYNAMIC",
    "model.layers.0.mlp.experts.1.gate_proj.weight": "W4A8_DYNAMIC",
    "model.layers.0.mlp.gate.weight": "FLOAT",
    "lm_head.weight": "W8A8_DYNAMIC",
}


def test_a_modelslim_description_by_format_and_kind() -> None:
    found = {(g.format, g.kind): g for g in modelslim_layers(DESCRIPTION)}
    assert set(found) == {
        (QuantFormat.MODELSLIM_W8A16, LayerKind.LINEAR),
        (QuantFormat.MODELSLIM_W4A8_PER_GROUP, LayerKind.LINEAR),
        (QuantFormat.MODELSLIM_W4A8_DYNAMIC, LayerKind.EXPERTS),
        (QuantFormat.MODELSLIM_W8A8_DYNAMIC, LayerKind.EMBEDDING),
    }
    linear = found[(QuantFormat.MODELSLIM_W8A16, LayerKind.LINEAR)]
    assert (linear.first, linear.count) == ("model.layers.0.self_attn.q_proj", 2)
    assert linear.says == (
        "quant_model_description.json says model.layers.0.self_attn.q_proj.weight is W8A16"
    )


def _ct(weights: dict[str, Any], acts: dict[str, Any] | None, fmt: str,
        ignore: list[str] | None = None, moe: bool = False) -> dict[str, Any]:
    """config.json as llm-compressor writes it (quantization_config's keys)."""
    config: dict[str, Any] = {"model_type": "qwen3_moe" if moe else "llama"}
    if moe:
        config["num_experts"] = 8
    config["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": fmt,
        "ignore": ignore if ignore is not None else ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights,
                                      "input_activations": acts}},
    }
    return config


W4A16 = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
         "group_size": 128, "dynamic": False}
INT8 = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}
TOKEN = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True}
FP8_BLOCK = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "block",
             "block_structure": [128, 128]}


@pytest.mark.parametrize(("config", "expected"), [
    (_ct(W4A16, None, "pack-quantized"), {(QuantFormat.CT_W4A16, LayerKind.LINEAR)}),
    (_ct({**W4A16, "symmetric": False}, None, "pack-quantized"),
     {(QuantFormat.CT_W4A16, LayerKind.LINEAR)}),
    (_ct(W4A16, None, "pack-quantized", moe=True),
     {(QuantFormat.CT_W4A16, LayerKind.LINEAR), (QuantFormat.CT_W4A16, LayerKind.EXPERTS)}),
    (_ct(W4A16, None, "pack-quantized", ignore=["lm_head", "re:.*mlp.experts.*"], moe=True),
     {(QuantFormat.CT_W4A16, LayerKind.LINEAR)}),
    # Not plain W4A16: 8-bit weight-only, or activation-ordered groups (g_idx).
    (_ct({**W4A16, "num_bits": 8}, None, "pack-quantized"),
     {(QuantFormat.CT_WNA16, LayerKind.LINEAR)}),
    (_ct({**W4A16, "actorder": "group"}, None, "pack-quantized"),
     {(QuantFormat.CT_WNA16, LayerKind.LINEAR)}),
    (_ct(INT8, TOKEN, "int-quantized"), {(QuantFormat.CT_INT8_W8A8, LayerKind.LINEAR)}),
    (_ct(INT8, {**TOKEN, "symmetric": False}, "int-quantized"),
     {(QuantFormat.CT_INT8_ASYMMETRIC, LayerKind.LINEAR)}),
    (_ct(FP8_BLOCK, {"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128,
                     "dynamic": True}, "float-quantized"),
     {(QuantFormat.CT_FP8_BLOCK, LayerKind.LINEAR)}),
])  # fmt: skip
def test_compressed_tensors_groups_by_format_and_kind(config, expected) -> None:  # type: ignore[no-untyped-def]
    assert {(g.format, g.kind) for g in compressed_tensors_layers(config)} == expected


def test_fp8_block_channel_and_online() -> None:
    block = {"quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic",
                                     "weight_block_size": [128, 128]}, "n_routed_experts": 4}
    assert {(g.format, g.kind) for g in fp8_layers(block)} == {
        (QuantFormat.FP8_BLOCK, LayerKind.LINEAR), (QuantFormat.FP8_BLOCK, LayerKind.EXPERTS)}
    channel = {"quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}}
    assert [g.format for g in fp8_layers(channel)] == [QuantFormat.FP8_CHANNEL]
    (online,) = quantized_layers(QuantMethod.FP8, {"model_type": "llama"}, None)
    assert online.says == "--quantization fp8 quantizes it to fp8 at load"


def test_an_unreadable_export_yields_nothing_here() -> None:
    # Detection reports a broken file in its own words; this reading stays quiet.
    assert quantized_layers(QuantMethod.ASCEND, None, ["not", "an", "object"]) == ()  # type: ignore[arg-type]
    assert quantized_layers(QuantMethod.COMPRESSED_TENSORS, {"quantization_config": 3}, None) == ()


@pytest.mark.parametrize("deployment", [host(), npu()], ids=["host", "npu"])
def test_the_plan_refuses_an_unserved_layer_naming_it_and_what_serves_it(deployment) -> None:  # type: ignore[no-untyped-def]
    layers = modelslim_layers(DESCRIPTION)
    plan = plan_config(attrs.evolve(deployment, quantized_layers=layers,
                                    detected_quantization=QuantMethod.ASCEND))
    messages = [str(e) for e in plan.errors]
    # The W8A16 linears and the per-channel W4A8_DYNAMIC experts are served; the per-group
    # W4A8_DYNAMIC linear and the lm_head are not.
    assert len(messages) == 2, messages
    assert not any(m.startswith("Layer model.layers.0.self_attn.q_proj") for m in messages)
    assert not any(m.startswith("Layer model.layers.0.mlp.experts") for m in messages)
    w4a8 = next(m for m in messages if "W4A8_DYNAMIC" in m)
    assert w4a8.startswith("Layer model.layers.0.self_attn.o_proj: "
                           "quant_model_description.json says")
    assert "and describes model.layers.0.self_attn.o_proj.weight_scale_second" in w4a8
    assert "does not serve for linear layers on" in w4a8
    assert "npu_weight_quant_batchmatmul" in w4a8 and "deprecated" in w4a8
    assert "per-channel W4A8_DYNAMIC (group_size 0" in w4a8
    assert any(m.startswith("Layer lm_head: quant_model_description.json says lm_head.weight "
                            "is W8A8_DYNAMIC") for m in messages)


def test_per_channel_and_per_group_w4a8_by_the_description() -> None:
    dense = {"model_quant_type": "W4A8_DYNAMIC", "group_size": 0,
             "model.layers.0.mlp.down_proj.weight": "W4A8_DYNAMIC",
             "model.layers.0.mlp.experts.0.down_proj.weight": "W4A8_DYNAMIC"}
    assert {g.format for g in modelslim_layers(dense)} == {QuantFormat.MODELSLIM_W4A8_DYNAMIC}
    # group_size 0 wins over a stray second-level scale; group_size > 0 makes every
    # W4A8_DYNAMIC weight per-group, experts included.
    stray = {**dense, "model.layers.0.mlp.down_proj.weight_scale_second": "W4A8_DYNAMIC"}
    assert {g.format for g in modelslim_layers(stray)} == {QuantFormat.MODELSLIM_W4A8_DYNAMIC}
    grouped = modelslim_layers({**dense, "group_size": 256})
    assert {(g.format, g.kind) for g in grouped} == {
        (QuantFormat.MODELSLIM_W4A8_PER_GROUP, LayerKind.LINEAR),
        (QuantFormat.MODELSLIM_W4A8_PER_GROUP, LayerKind.EXPERTS)}
    assert all(g.says.endswith("is W4A8_DYNAMIC with group_size 256") for g in grouped)
    (_, experts) = sorted(quant_refusals(grouped, DeviceKind.NPU), key=str)
    assert str(experts).startswith("Layer model.layers.0.mlp.experts.0.down_proj: ")
    assert "vllm-ascend no longer serves them either" in str(experts)
    assert "on an Ascend NPU" in str(experts)


TINY = {"hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "intermediate_size": 384}


@pytest.mark.parametrize(("deployment", "tp", "config", "problem"), [
    (host(), 1, TINY, None),
    (npu(), 2, TINY, None),
    # 16 scale_bias slices cannot be shared by 3 ranks (host and NPU alike).
    (host(), 3, {**TINY, "hidden_size": 192, "intermediate_size": 576}, "cannot share"),
    # gate_up_proj: 2 x 18 outputs per rank, even (the host packs pairs), not a multiple of 8.
    (host(), 1, {**TINY, "intermediate_size": 18}, None),
    (npu(), 1, {**TINY, "intermediate_size": 18}, "not a multiple of 8"),
    (npu(), 1, {**TINY, "intermediate_size": 70000}, "inner dimensions below 65536"),
])  # fmt: skip
def test_the_plan_checks_w4a8_linears_fit_the_split_and_the_int4_layout(  # type: ignore[no-untyped-def]
    deployment, tp: int, config, problem: str | None
) -> None:
    description = {"model_quant_type": "W4A8_DYNAMIC", "group_size": 0,
                   "model.layers.0.mlp.down_proj.weight": "W4A8_DYNAMIC"}
    layers = quantized_layers(QuantMethod.ASCEND, config, description)
    assert layers[0].projections  # from the config's sizes
    deployment = attrs.evolve(deployment, quantized_layers=layers,
                              parallel=attrs.evolve(deployment.parallel, tp=tp))
    messages = [str(e) for e in plan_config(deployment).errors]
    if problem is None:
        assert not [m for m in messages if "W4A8" in m], messages
        return
    (message,) = [m for m in messages if "W4A8" in m]
    assert message.startswith("Layer model.layers.0.mlp.down_proj and the other linear layers")
    assert problem in message and f"split over {tp} rank(s)" in message


@pytest.mark.parametrize("deployment", [host(), npu()], ids=["host", "npu"])
def test_served_layers_plan_without_refusal(deployment) -> None:  # type: ignore[no-untyped-def]
    layers = tuple(QuantizedLayers(f, k, "model.layers.0.mlp.down_proj", 1, "x")
                   for f, k in SERVED)
    assert quant_refusals(layers, deployment.device_kind) == ()
    assert plan_config(attrs.evolve(deployment, quantized_layers=layers)).ok


@pytest.mark.parametrize("deployment", [host(), npu()], ids=["host", "npu"])
@pytest.mark.parametrize("weights", [W4A16, {**W4A16, "symmetric": False},
                                     {**W4A16, "strategy": "channel", "group_size": None}],
                         ids=["group-sym", "group-asym", "channel"])
def test_w4a16_experts_plan_without_refusal(deployment, weights) -> None:  # type: ignore[no-untyped-def]
    layers = compressed_tensors_layers(_ct(weights, None, "pack-quantized", moe=True))
    experts = next(g for g in layers if g.kind is LayerKind.EXPERTS)
    assert (experts.format, experts.first) == (
        QuantFormat.CT_W4A16, "model.layers.0.mlp.experts.0.gate_proj")
    plan = plan_config(attrs.evolve(deployment, quantized_layers=layers,
                                    detected_quantization=QuantMethod.COMPRESSED_TENSORS))
    assert plan.ok, plan.errors
    verdict = quant_verdict(QuantFormat.CT_W4A16, LayerKind.EXPERTS, deployment.device_kind)
    assert isinstance(verdict, Supported)
    assert ("ct-wna16-moe-int4" if deployment.device_kind is DeviceKind.CPU
            else "npu_grouped_matmul in its antiquant mode") in verdict.note


@pytest.mark.parametrize("deployment", [host(), npu()], ids=["host", "npu"])
def test_activation_ordered_w4a16_experts_stay_refused_before_load(deployment) -> None:  # type: ignore[no-untyped-def]
    config = _ct({**W4A16, "actorder": "group"}, None, "pack-quantized", moe=True)
    plan = plan_config(attrs.evolve(deployment, quantized_layers=compressed_tensors_layers(
        config), detected_quantization=QuantMethod.COMPRESSED_TENSORS))
    messages = [str(e) for e in plan.errors]
    assert any(m.startswith("Layer model.layers.0.mlp.experts.0.gate_proj") for m in messages)
    assert all("activation-ordered" in m for m in messages), messages


def test_w4a16_experts_on_the_npu_refuse_expert_parallelism_before_load() -> None:
    layers = compressed_tensors_layers(_ct(W4A16, None, "pack-quantized", moe=True))
    ep = {"parallel": attrs.evolve(npu().parallel, tp=2, expert_parallel=True),
          "quantized_layers": layers, "detected_quantization": QuantMethod.COMPRESSED_TENSORS}
    (error,) = plan_config(attrs.evolve(npu(), **ep)).errors
    assert str(error).startswith("Layer model.layers.0.mlp.experts.0.gate_proj: ")
    assert "on an Ascend NPU, but not with expert parallelism" in str(error)
    assert "--enable-expert-parallel" in error.hint
    # The host serves it: its experts are dequantized float layers.
    host_plan = plan_config(attrs.evolve(host(), **ep))
    assert host_plan.ok, host_plan.errors
