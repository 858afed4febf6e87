"""Patch ct-wna16-moe-int4 and AscendW4A16MoeMethod against the installed vLLM and
compressed-tensors, no engine: which experts the patch hands to the plugin's method (before
vLLM's WNA16 method looks for a backend), and the method's load on the host: its
parameters are vLLM's (the names and shapes the expert loader fills), and after load each
expert is the files' dequantized weight, bit for bit (an independent reader:
support.quant_reference.w4a16_weight)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
    CompressedTensorsConfig,
)
from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
    compressed_tensors_moe as ct_moe,
)

from adapters.vllm.layers import fused_moe
from adapters.vllm.patches import wna16_moe
from adapters.vllm.quantization.moe_w4a16 import AscendW4A16MoeMethod
from ascend_core.errors import QuantizationError
from ascend_core.patches import REGISTRY
from support.quant_reference import w4a16_weight

SPEC = next(s for s in REGISTRY if s.id == "ct-wna16-moe-int4")
E, H, INTER = 4, 64, 32
EXPERTS = "re:.*mlp\\.experts\\.\\d+\\.(gate|up|down)_proj$"
_W4 = {"num_bits": 4, "type": "int", "strategy": "group", "dynamic": False}


def _config(weights: dict[str, Any], ignore: list[str] | None = None) -> CompressedTensorsConfig:
    return CompressedTensorsConfig.from_config({
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "ignore": ignore or ["lm_head"],
        "config_groups": {"group_0": {"targets": [EXPERTS], "weights": weights,
                                      "format": "pack-quantized"}},
    })


def _layer() -> torch.nn.Module:
    layer = torch.nn.Module()
    layer.ckpt_gate_proj_name, layer.ckpt_up_proj_name = "gate_proj", "up_proj"
    layer.ckpt_down_proj_name = "down_proj"
    layer.layer_name = "model.layers.0.mlp.experts"
    layer.moe_config = SimpleNamespace(use_ep=False, has_bias=False)
    return layer


@pytest.fixture
def patched():  # type: ignore[no-untyped-def]
    holder = ct_moe.CompressedTensorsMoEMethod
    saved = holder.__dict__["get_moe_method"]
    try:
        wna16_moe.use_int4_moe_method(SPEC)
        once = holder.__dict__["get_moe_method"]
        wna16_moe.use_int4_moe_method(SPEC)  # re-entrant: not wrapped twice
        assert holder.__dict__["get_moe_method"] is once
        with set_current_vllm_config(VllmConfig()):
            yield holder.get_moe_method
    finally:
        holder.get_moe_method = saved


@pytest.mark.parametrize(("weights", "group", "symmetric"), [
    ({**_W4, "symmetric": True, "group_size": 32}, 32, True),
    ({**_W4, "symmetric": False, "group_size": 16}, 16, False),
    ({**_W4, "symmetric": False, "strategy": "channel"}, None, False),
], ids=["g32-sym", "g16-asym", "channel-asym"])
def test_plain_w4a16_experts_get_the_plugins_method(patched, weights, group, symmetric) -> None:  # type: ignore[no-untyped-def]
    method = patched(_config(weights), _layer(), "model.layers.0.mlp.experts")
    assert type(method) is AscendW4A16MoeMethod
    assert (method.group_size, method.symmetric) == (group, symmetric)


def test_other_weight_only_experts_are_left_to_vllm() -> None:
    # (The plan refuses them before load: support table row CT_WNA16; vLLM's config itself
    # refuses activation-ordered groups.)
    layer = _layer()
    eight_bit = _config({**_W4, "num_bits": 8, "symmetric": True, "group_size": 32})
    assert wna16_moe._int4_experts(eight_bit, layer, layer.layer_name) is None
    ignored = _config({**_W4, "symmetric": True, "group_size": 32}, ignore=[EXPERTS])
    assert wna16_moe._int4_experts(ignored, layer, layer.layer_name) is None


def _expert_tensors(gen: torch.Generator, out: int, inp: int, group: int | None,
                    symmetric: bool) -> dict[str, torch.Tensor]:
    """One projection as llm-compressor writes it (weight_packed, weight_scale,
    weight_shape, weight_zero_point)."""
    groups = 1 if group is None else inp // group
    values = torch.randint(-8, 8, (out, inp), generator=gen, dtype=torch.int8)
    tensors = {"weight_packed": pack_to_int32(values, 4),
               "weight_scale": torch.rand(out, groups, generator=gen) * 0.05 + 0.01,
               "weight_shape": torch.tensor([out, inp])}
    if not symmetric:
        zeros = torch.randint(-8, 8, (out, groups), generator=gen, dtype=torch.int8)
        tensors["weight_zero_point"] = pack_to_int32(zeros, 4, packed_dim=0)
    return tensors


@pytest.mark.parametrize(("group", "symmetric"), [(32, True), (16, False), (None, False)],
                         ids=["g32-sym", "g16-asym", "channel-asym"])
def test_the_host_holds_each_expert_dequantized_exactly(monkeypatch, group, symmetric) -> None:  # type: ignore[no-untyped-def]
    # The float MoE layer's own checks need a whole RoutedExperts; the experts are ours.
    monkeypatch.setattr(fused_moe.AscendUnquantizedFusedMoEMethod,
                        "process_weights_after_loading", lambda self, layer: None)
    gen = torch.Generator().manual_seed(0)
    layer = _layer()
    with set_current_vllm_config(VllmConfig()):
        method = AscendW4A16MoeMethod(layer.moe_config, group, symmetric)
        method.create_weights(layer, E, H, INTER, torch.float32, weight_loader=None)
    names = {n: tuple(p.shape) for n, p in layer.named_parameters()}
    groups = (1, 1) if group is None else (H // group, INTER // group)
    expected = {"w13_weight_packed": (E, 2 * INTER, H // 8), "w2_weight_packed": (E, H, INTER // 8),
                "w13_weight_scale": (E, 2 * INTER, groups[0]), "w2_weight_scale": (E, H, groups[1]),
                "w13_weight_shape": (E, 2), "w2_weight_shape": (E, 2)}
    if not symmetric:
        expected |= {"w13_weight_zero_point": (E, 2 * INTER // 8, groups[0]),
                     "w2_weight_zero_point": (E, H // 8, groups[1])}
    assert names == expected
    files = {(e, p): _expert_tensors(gen, *((H, INTER) if p == "down" else (INTER, H)),
                                     group, symmetric)
             for e in range(E) for p in ("gate", "up", "down")}
    for (e, p), tensors in files.items():  # as vLLM's loader fills them (TP = 1)
        stem = "w2" if p == "down" else "w13"
        for suffix, value in tensors.items():
            param = getattr(layer, f"{stem}_{suffix}").data[e]
            if suffix == "weight_shape" or p == "down":
                param.copy_(value)
            else:
                half = param.shape[0] // 2
                param[(0 if p == "gate" else half):][:half].copy_(value)
    method.process_weights_after_loading(layer)
    for e in range(E):
        gate_up = torch.cat([w4a16_weight(files[e, "gate"]), w4a16_weight(files[e, "up"])])
        assert torch.equal(layer.w13_weight.data[e], gate_up)
        assert torch.equal(layer.w2_weight.data[e], w4a16_weight(files[e, "down"]))
    assert not any(n.endswith(("_packed", "_scale", "_zero_point", "_shape"))
                   for n, _ in layer.named_parameters())


def test_a_group_that_does_not_divide_is_refused_before_load() -> None:
    layer = _layer()
    with set_current_vllm_config(VllmConfig()):
        method = AscendW4A16MoeMethod(layer.moe_config, 48, True)
        with pytest.raises(QuantizationError, match="does not divide") as error:
            method.create_weights(layer, E, H, INTER, torch.float32, weight_loader=None)
    assert str(error.value).startswith("MoE layer model.layers.0.mlp.experts: ")
    assert not list(layer.parameters())
