"""FP8 checkpoints (issue 45): the path each chip takes, the formats served and refused,
and block shapes that do not fit a rank's slice, refused by the plan before any weight
loads, in the plugin's words."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from ascend_core.plan import plan_config
from ascend_core.quantization import QuantMethod
from ascend_core.quantization.export_layers import (
    LayerKind,
    QuantFormat,
    compressed_tensors_layers,
    fp8_layers,
)
from ascend_core.quantization.fp8 import (
    Fp8Path,
    block_shape_problem,
    dense_projections,
    expert_projections,
    fp8_serving,
)
from ports.device import ChipFamily, DeviceKind
from unit.core.plan_fixtures import host, npu

# tiny-llama's sizes (scripts/make_models.py): q 128, k/v 64, MLP 384.
TINY = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 384,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32}
FP8_WEIGHTS = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False}
FP8_TOKEN = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "token",
             "dynamic": True}


def _ct(weights: dict[str, Any], acts: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    group = {"targets": ["Linear"], "weights": weights, "format": "float-quantized"}
    if acts is not None:
        group["input_activations"] = acts
    return {**TINY, **extra, "quantization_config": {
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "ignore": ["lm_head"], "config_groups": {"group_0": group}}}


def _hf(block: list[int] | None, scheme: str = "dynamic") -> dict[str, Any]:
    qconfig: dict[str, Any] = {"quant_method": "fp8", "activation_scheme": scheme}
    if block is not None:
        qconfig["weight_block_size"] = block
    return {**TINY, "quantization_config": qconfig}


FP8_DYNAMIC = _ct({**FP8_WEIGHTS, "strategy": "channel"}, FP8_TOKEN)
FP8_BLOCK_64 = _ct({**FP8_WEIGHTS, "strategy": "block", "block_structure": [64, 64]},
                   {**FP8_TOKEN, "strategy": "group", "group_size": 64})


@pytest.mark.parametrize("chip", [ChipFamily.A2, ChipFamily.A3, ChipFamily.A5,
                                  ChipFamily.P310])
def test_every_npu_chip_dequantizes_at_load_and_says_why(chip) -> None:  # type: ignore[no-untyped-def]
    serving = fp8_serving(chip, DeviceKind.NPU)
    assert serving.path is Fp8Path.DEQUANTIZE_AT_LOAD
    if chip is ChipFamily.A5:  # has fp8 matmuls, but this build has no op for them
        assert "Ascend 950 has fp8 matmuls" in serving.reason
        assert "takes the A2/A3 path" in serving.reason
    else:
        assert "has no fp8 matmul" in serving.reason


def test_the_host_follows_the_a2_a3_path() -> None:
    serving = fp8_serving(ChipFamily.HOST, DeviceKind.CPU)
    assert serving.path is Fp8Path.DEQUANTIZE_AT_LOAD
    assert serving.describe().startswith("fp8 weights: dequantize at load to the model dtype")


@pytest.mark.parametrize(("config", "expected"), [
    (FP8_DYNAMIC, QuantFormat.CT_FP8_CHANNEL),
    (_ct({**FP8_WEIGHTS, "strategy": "channel"}, None), QuantFormat.CT_FP8_CHANNEL),
    (FP8_BLOCK_64, QuantFormat.CT_FP8_BLOCK),
    # Per-tensor weights, static activation scales: refused (as vllm-ascend refuses them).
    (_ct({**FP8_WEIGHTS, "strategy": "tensor"}, {**FP8_TOKEN, "strategy": "tensor"}),
     QuantFormat.CT_FP8),
    (_ct({**FP8_WEIGHTS, "strategy": "channel"},
         {**FP8_TOKEN, "strategy": "tensor", "dynamic": False}), QuantFormat.CT_FP8),
])  # fmt: skip
def test_compressed_tensors_fp8_formats(config, expected) -> None:  # type: ignore[no-untyped-def]
    (group,) = compressed_tensors_layers(config)
    assert (group.format, group.kind) == (expected, LayerKind.LINEAR)
    assert (group.block is not None) == (expected is QuantFormat.CT_FP8_BLOCK)


def test_block_layers_carry_their_block_and_projections() -> None:
    (group,) = fp8_layers(_hf([64, 64]))
    assert group.format is QuantFormat.FP8_BLOCK and group.block == (64, 64)
    assert [p.name for p in group.projections] == [
        "self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"]


@pytest.mark.parametrize(("block", "tp", "problem"), [
    ((64, 64), 1, None),
    ((32, 32), 2, None),
    # The last shard of a fused layer may end in a partial block (v of qkv, at TP 1).
    ((128, 64), 1, "self_attn.qkv_proj has a fused shard of 64 output features, not a "
                   "whole number of 128-row blocks"),
    ((64, 64), 2, "self_attn.qkv_proj has a fused shard of 32 output features per rank "
                  "(TP=2), not a whole number of 64-row blocks"),
    ((32, 256), 2, "self_attn.o_proj's input slice of 64 features per rank (TP=2) is not a "
                   "whole number of 256-column blocks"),
    # One KV head per rank when TP exceeds the KV heads (replicated): 32 wide, not 16.
    ((32, 32), 4, None),
])  # fmt: skip
def test_block_shape_problems_follow_vllms_rule(block, tp, problem) -> None:  # type: ignore[no-untyped-def]
    assert block_shape_problem(dense_projections(TINY), block, tp) == problem


@pytest.mark.parametrize("deployment", [host(), npu(chip=ChipFamily.A3)], ids=["host", "a3"])
@pytest.mark.parametrize("config", [FP8_DYNAMIC, FP8_BLOCK_64], ids=["channel", "block"])
def test_served_fp8_plans_with_the_chips_path(deployment, config) -> None:  # type: ignore[no-untyped-def]
    plan = plan_config(attrs.evolve(
        deployment, quantized_layers=compressed_tensors_layers(config),
        detected_quantization=QuantMethod.COMPRESSED_TENSORS))
    assert plan.ok, plan.errors
    assert plan.decisions.fp8 == fp8_serving(deployment.chip_family, deployment.device_kind)
    assert "  quant   fp8 weights: dequantize at load" in plan.describe()


def test_an_unserved_export_has_no_fp8_decision() -> None:
    plan = plan_config(host())
    assert plan.decisions.fp8 is None


@pytest.mark.parametrize("deployment", [host(), npu(chip=ChipFamily.A2)], ids=["host", "a2"])
def test_a_block_that_does_not_fit_is_refused_before_load(deployment) -> None:  # type: ignore[no-untyped-def]
    # The official releases' [128, 128] on a model whose k/v projections are 64 wide:
    # vLLM would stop in create_weights with its own ValueError.
    layers = fp8_layers(_hf([128, 128]))
    plan = plan_config(attrs.evolve(deployment, quantized_layers=layers,
                                    detected_quantization=QuantMethod.FP8))
    (error,) = plan.errors
    message = str(error)
    assert message.startswith("Layer model.layers.0.self_attn.q_proj and the other linear "
                              "layers: config.json quantization_config stores it in fp8")
    assert "[128, 128] weight blocks, which do not fit this model split over 1 rank(s)" in message
    where = "an Ascend NPU" if deployment.device_kind.value == "npu" else "the host device"
    assert f"1 rank(s) on {where}:" in message
    assert "fused shard of 64 output features, not a whole number of 128-row blocks" in message
    assert "FP8_DYNAMIC" in error.hint


def test_the_same_block_is_refused_at_a_tp_it_does_not_fit() -> None:
    layers = compressed_tensors_layers(FP8_BLOCK_64)
    ok = plan_config(attrs.evolve(npu(), quantized_layers=layers))
    assert ok.ok, ok.errors
    plan = plan_config(attrs.evolve(npu(parallel={"tp": 2}), quantized_layers=layers))
    assert any("per rank (TP=2)" in str(e) for e in plan.errors), plan.errors


@pytest.mark.parametrize("config", [
    _hf(None),  # per-tensor scales
    _ct({**FP8_WEIGHTS, "strategy": "tensor"}, {**FP8_TOKEN, "strategy": "tensor"}),
], ids=["hf-per-tensor", "ct-per-tensor"])
@pytest.mark.parametrize("deployment", [host(), npu()], ids=["host", "npu"])
def test_per_tensor_fp8_is_refused_naming_what_serves(config, deployment) -> None:  # type: ignore[no-untyped-def]
    method = config["quantization_config"]["quant_method"]
    layers = (fp8_layers(config) if method == "fp8" else compressed_tensors_layers(config))
    plan = plan_config(attrs.evolve(deployment, quantized_layers=layers))
    (error,) = plan.errors
    assert "per-tensor weight scales and static activation scales are refused" in str(error)
    assert "FP8_DYNAMIC or FP8_BLOCK" in error.hint
    assert plan.decisions.fp8 is None


@pytest.mark.parametrize("deployment", [host(), npu()], ids=["host", "npu"])
@pytest.mark.parametrize("config", [FP8_DYNAMIC, FP8_BLOCK_64], ids=["channel", "block"])
def test_compressed_tensors_fp8_experts_are_served_dequantized(deployment, config) -> None:  # type: ignore[no-untyped-def]
    moe = {**config, "model_type": "qwen3_moe", "num_experts": 8}
    layers = compressed_tensors_layers(moe)
    assert LayerKind.EXPERTS in {g.kind for g in layers}
    plan = plan_config(attrs.evolve(deployment, quantized_layers=layers,
                                    detected_quantization=QuantMethod.COMPRESSED_TENSORS))
    assert plan.ok, plan.errors
    assert plan.decisions.fp8 == fp8_serving(deployment.chip_family, deployment.device_kind)


@pytest.mark.parametrize("deployment", [host(), npu()], ids=["host", "npu"])
def test_fp8_method_experts_are_served_dequantized_where_blocks_fit(deployment) -> None:  # type: ignore[no-untyped-def]
    # DeepSeek-V3's and Qwen3's official FP8 releases (patch fp8-moe-dequant).
    moe = {**_hf([64, 64]), "model_type": "qwen3_moe", "num_experts": 8}
    plan = plan_config(attrs.evolve(deployment, quantized_layers=fp8_layers(moe)))
    assert plan.ok, plan.errors
    assert plan.decisions.fp8 == fp8_serving(deployment.chip_family, deployment.device_kind)
    # vLLM's validate_fp8_block_shape_moe: the same block check as compressed-tensors'.
    odd = {**moe, "moe_intermediate_size": 96}
    (error,) = plan_config(attrs.evolve(deployment, quantized_layers=fp8_layers(odd))).errors
    assert str(error).startswith(
        "Layer model.layers.0.mlp.experts.0.gate_proj and the other MoE experts: ")
    assert "fused shard of 96 output features, not a whole number of 64-row blocks" in str(
        error)


def test_experts_blocks_that_do_not_fit_are_refused_before_load() -> None:
    # vLLM's rule (validate_fp8_block_shape_moe): the gate/up slice a whole number of
    # block_n rows; with TP > 1 the down projection's input slice whole block_k columns.
    moe = {**FP8_BLOCK_64, "model_type": "qwen3_moe", "num_experts": 8,
           "moe_intermediate_size": 96}
    layers = compressed_tensors_layers(moe)
    experts = next(g for g in layers if g.kind is LayerKind.EXPERTS)
    assert experts.block == (64, 64) and [p.name for p in experts.projections] == [
        "mlp.experts.w13 (gate/up)", "mlp.experts.w2 (down)"]
    plan = plan_config(attrs.evolve(host(), quantized_layers=layers,
                                    detected_quantization=QuantMethod.COMPRESSED_TENSORS))
    (error,) = plan.errors
    assert str(error).startswith(
        "Layer model.layers.0.mlp.experts.0.gate_proj and the other MoE experts: ")
    assert "fused shard of 96 output features, not a whole number of 64-row blocks" in str(
        error)
    fits = {**moe, "moe_intermediate_size": 128}
    assert block_shape_problem(expert_projections(fits), (64, 64), 1) is None
    assert block_shape_problem(expert_projections(fits), (32, 64), 4) == (
        "mlp.experts.w2 (down)'s input slice of 32 features per rank (TP=4) is not a whole "
        "number of 64-column blocks")
