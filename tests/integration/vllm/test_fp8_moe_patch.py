"""Patches ct-fp8-moe-dequant and fp8-moe-dequant against the installed vLLM and
compressed-tensors, no engine: which experts they hand to AscendFp8DequantMoeMethod (before
vLLM's fp8 MoE method looks for a backend), and that ct-fp8-moe-dequant composes with
ct-wna16-moe-int4, which wraps the same CompressedTensorsMoEMethod.get_moe_method: applied
in either order and again, each wraps once and each scheme reaches its own method. The
method's load and ids are proven in engines
(tests/integration/npu/test_fp8_w4a8_on_emulated_npu.py)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.fused_moe import RoutedExperts, UnquantizedFusedMoEMethod
from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
    CompressedTensorsConfig,
)
from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
    compressed_tensors_moe as ct_moe,
)
from vllm.model_executor.layers.quantization.fp8 import Fp8Config

from adapters.vllm.patches import fp8_moe, wna16_moe
from adapters.vllm.quantization.moe_fp8 import AscendFp8DequantMoeMethod
from adapters.vllm.quantization.moe_w4a16 import AscendW4A16MoeMethod
from ascend_core.patches import REGISTRY

SPECS = {s.id: s for s in REGISTRY
         if s.id in ("ct-fp8-moe-dequant", "ct-wna16-moe-int4", "fp8-moe-dequant")}
APPLY = {"ct-fp8-moe-dequant": fp8_moe.use_fp8_dequant_moe_method,
         "ct-wna16-moe-int4": wna16_moe.use_int4_moe_method}
EXPERTS = "re:.*mlp\\.experts\\.\\d+\\.(gate|up|down)_proj$"
LAYER = "model.layers.0.mlp.experts"
# llm-compressor's FP8_DYNAMIC and FP8_BLOCK presets (tests/support/quant_table.py).
_FP8 = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False}
CHANNEL = ({**_FP8, "strategy": "channel"},
           {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "token",
            "dynamic": True})
BLOCK = ({**_FP8, "strategy": "block", "block_structure": [64, 32]},
         {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "group",
          "group_size": 32, "dynamic": True})


def _config(weights: dict[str, Any], acts: dict[str, Any] | None, fmt: str,
            ignore: list[str] | None = None) -> CompressedTensorsConfig:
    return CompressedTensorsConfig.from_config({
        "quant_method": "compressed-tensors", "format": fmt, "ignore": ignore or ["lm_head"],
        "config_groups": {"group_0": {"targets": [EXPERTS], "weights": weights,
                                      "input_activations": acts, "format": fmt}},
    })


def _layer() -> torch.nn.Module:
    layer = torch.nn.Module()
    layer.ckpt_gate_proj_name, layer.ckpt_up_proj_name = "gate_proj", "up_proj"
    layer.ckpt_down_proj_name = "down_proj"
    layer.layer_name = LAYER
    layer.moe_config = SimpleNamespace(use_ep=False, has_bias=False)
    return layer


def _unpatched(function: Any) -> Any:
    """vLLM's own function under any of our patches' wrappers."""
    while hasattr(function, "__ascend_patch__"):
        function = function.__wrapped__
    return function


@pytest.fixture(params=[("ct-fp8-moe-dequant", "ct-wna16-moe-int4"),
                        ("ct-wna16-moe-int4", "ct-fp8-moe-dequant")],
                ids=["fp8-inside", "fp8-outside"])
def patched(request: pytest.FixtureRequest) -> Iterator[Any]:
    holder = ct_moe.CompressedTensorsMoEMethod
    saved = holder.__dict__["get_moe_method"]
    try:
        holder.get_moe_method = staticmethod(_unpatched(saved.__func__))
        for patch_id in request.param:
            APPLY[patch_id](SPECS[patch_id])
        both = holder.__dict__["get_moe_method"]
        for patch_id in request.param:  # re-entrant, whichever is outermost
            APPLY[patch_id](SPECS[patch_id])
        assert holder.__dict__["get_moe_method"] is both
        with set_current_vllm_config(VllmConfig()):
            yield holder.get_moe_method
    finally:
        holder.get_moe_method = saved


@pytest.mark.parametrize(("scheme", "block"), [(CHANNEL, None), (BLOCK, (64, 32))],
                         ids=["channel", "block"])
def test_fp8_experts_get_the_dequantizing_method(patched, scheme, block) -> None:  # type: ignore[no-untyped-def]
    method = patched(_config(*scheme, "float-quantized"), _layer(), LAYER)
    assert type(method) is AscendFp8DequantMoeMethod
    assert method.fp8_block == block


def test_w4a16_experts_still_get_their_method(patched) -> None:  # type: ignore[no-untyped-def]
    w4 = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32,
          "symmetric": True, "dynamic": False}
    method = patched(_config(w4, None, "pack-quantized"), _layer(), LAYER)
    assert type(method) is AscendW4A16MoeMethod


@pytest.mark.parametrize(("weights", "acts"), [
    ({**_FP8, "strategy": "tensor"}, {**CHANNEL[1], "strategy": "tensor"}),  # per tensor
    (CHANNEL[0], {**CHANNEL[1], "strategy": "tensor", "dynamic": False}),  # static acts
], ids=["per-tensor", "static-activations"])
def test_other_fp8_experts_are_left_to_vllm(weights, acts) -> None:  # type: ignore[no-untyped-def]
    # (The plan refuses them before load: support table row CT_FP8.)
    layer = _layer()
    assert fp8_moe._fp8_experts(_config(weights, acts, "float-quantized"), layer, LAYER) is None
    ignored = _config(*CHANNEL, "float-quantized", ignore=[EXPERTS])
    assert fp8_moe._fp8_experts(ignored, layer, LAYER) is None


# The fp8 method (Fp8Config): DeepSeek-V3's and Qwen3's official FP8 releases.
FP8_BLOCK = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
             "weight_block_size": [64, 32]}


def _experts() -> RoutedExperts:
    layer = RoutedExperts.__new__(RoutedExperts)  # isinstance as Fp8Config asks, no build
    torch.nn.Module.__init__(layer)
    layer.moe_config = SimpleNamespace(use_ep=False, has_bias=False)
    return layer


@pytest.fixture
def fp8_patched() -> Iterator[None]:
    saved = Fp8Config.__dict__["get_quant_method"]
    vllms = _unpatched(saved)  # an engine earlier in this process may have applied it
    spec = SPECS["fp8-moe-dequant"]
    try:
        Fp8Config.get_quant_method = vllms
        fp8_moe.use_fp8_dequant_moe_method_for_fp8_config(spec)
        once = Fp8Config.__dict__["get_quant_method"]
        fp8_moe.use_fp8_dequant_moe_method_for_fp8_config(spec)  # re-entrant
        assert Fp8Config.__dict__["get_quant_method"] is once
        assert once.__wrapped__ is vllms
        with set_current_vllm_config(VllmConfig()):
            yield
    finally:
        Fp8Config.get_quant_method = saved


def test_fp8_method_block_experts_get_the_dequantizing_method(fp8_patched) -> None:  # type: ignore[no-untyped-def]
    method = Fp8Config.from_config(FP8_BLOCK).get_quant_method(_experts(), LAYER)
    assert type(method) is AscendFp8DequantMoeMethod
    assert method.fp8_block == (64, 32) and method.scale_name == "weight_scale_inv"


def test_other_fp8_method_layers_are_left_to_vllm(fp8_patched) -> None:  # type: ignore[no-untyped-def]
    # Per-tensor fp8 experts: the plan refuses them before load (support table FP8_CHANNEL);
    # here vLLM's own method is built (its backend search fails out of tree).
    per_tensor = Fp8Config.from_config({"quant_method": "fp8", "activation_scheme": "dynamic"})
    assert fp8_moe._fp8_method_experts_block(per_tensor, _experts(), LAYER) is None
    static = Fp8Config.from_config({"quant_method": "fp8", "activation_scheme": "static"})
    assert fp8_moe._fp8_method_experts_block(static, _experts(), LAYER) is None
    skipped = Fp8Config.from_config({**FP8_BLOCK, "ignored_layers": [LAYER]})
    assert fp8_moe._fp8_method_experts_block(skipped, _experts(), LAYER) is None
    # vLLM's unquantized method: its own class, or the plugin's register_oot twin of it
    # once an engine in this process has registered the plugin's custom ops.
    left = skipped.get_quant_method(_experts(), LAYER)
    assert isinstance(left, UnquantizedFusedMoEMethod), type(left)
    assert not isinstance(left, AscendFp8DequantMoeMethod)
    block = Fp8Config.from_config(FP8_BLOCK)
    linear = torch.nn.Linear(4, 4)
    assert fp8_moe._fp8_method_experts_block(block, linear, "model.layers.0.o_proj") is None
    assert block.get_quant_method(linear, "model.layers.0.o_proj") is None
