"""Broken ModelSlim exports stop startup before serving, naming the tensor and what was
expected: a description without an entry, fused shards of different schemes, a tensor
of the wrong dtype, a tensor the scheme needs but the checkpoint lacks; and the same for
the experts of a MoE export (an expert weight not described, experts of one layer with
different schemes, an expert tensor of the wrong dtype or missing); a per-group W8A16
scale (W8A16 is served per channel); W4A8_DYNAMIC experts and linear layers with unpacked
int4 weights or a scale_bias that does not fit them."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from engine_teardown import clean_distributed_state

from support.quant_reference import local_export

SHARD = "quant_model_weights-00001-of-00001.safetensors"
DESCRIPTION = "quant_model_description.json"


def _broken(tmp_path: Path, scheme: str, edit_description: Callable[[dict[str, Any]], None]
            | None = None, edit_tensors: Callable[[dict[str, Any]], None] | None = None,
            style: str = "llama") -> str:
    import torch  # noqa: F401  (safetensors.torch needs it loaded)
    from safetensors.torch import load_file, save_file

    out = tmp_path / f"broken-{style}-{scheme}"
    shutil.copytree(local_export(style, scheme), out)
    if edit_description is not None:
        description = json.loads((out / DESCRIPTION).read_text())
        edit_description(description)
        (out / DESCRIPTION).write_text(json.dumps(description))
    if edit_tensors is not None:
        tensors = load_file(str(out / SHARD))
        edit_tensors(tensors)
        save_file(tensors, str(out / SHARD))
    return str(out)


def _start(model: str) -> str:
    from vllm import LLM

    # vLLM may wrap our error: read the chain. A refusal of the plan (before the engine)
    # is our StartupError, a SystemExit.
    with pytest.raises((Exception, SystemExit)) as caught:
        LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=256,
            block_size=16, kv_cache_memory_bytes=16 << 20, seed=0)
    # A start that failed half-way leaves its process groups; the next start (a MoE
    # model needs its expert-parallel group) must make its own.
    clean_distributed_state()
    text, exc = [], caught.value
    while exc is not None:  # the message of each exception in the chain
        text.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(text)


def test_a_layer_the_description_does_not_name(tmp_path: Path) -> None:
    def drop(d: dict[str, Any]) -> None:
        del d["model.layers.0.mlp.down_proj.weight"]

    message = _start(_broken(tmp_path, "w8a8", edit_description=drop))
    assert "Layer model.layers.0.mlp.down_proj" in message
    assert "has no entry model.layers.0.mlp.down_proj.weight" in message


def test_fused_shards_of_different_schemes(tmp_path: Path) -> None:
    def mix(d: dict[str, Any]) -> None:
        d["model.layers.1.self_attn.k_proj.weight"] = "W8A8_DYNAMIC"

    message = _start(_broken(tmp_path, "w8a8", edit_description=mix))
    assert "Fused layer model.layers.1.self_attn.qkv_proj" in message
    assert "q_proj=W8A8, k_proj=W8A8_DYNAMIC, v_proj=W8A8" in message


def test_a_tensor_of_the_wrong_dtype(tmp_path: Path) -> None:
    def to_float(t: dict[str, Any]) -> None:
        name = "model.layers.0.self_attn.v_proj.quant_bias"
        t[name] = t[name].float()

    message = _start(_broken(tmp_path, "w8a8", edit_tensors=to_float))
    assert ("Checkpoint tensor model.layers.0.self_attn.v_proj.quant_bias is float32, but a "
            "W8A8 layer stores quant_bias as int32") in message


def test_a_float_weight_where_int8_is_described(tmp_path: Path) -> None:
    def to_float(t: dict[str, Any]) -> None:
        name = "model.layers.1.mlp.up_proj.weight"
        t[name] = t[name].float()

    message = _start(_broken(tmp_path, "w8a8_dynamic", edit_tensors=to_float))
    assert ("Checkpoint tensor model.layers.1.mlp.up_proj.weight is float32, but a "
            "W8A8_DYNAMIC layer stores weight as int8") in message


def test_a_tensor_the_scheme_needs_is_missing(tmp_path: Path) -> None:
    def drop(t: dict[str, Any]) -> None:
        del t["model.layers.0.mlp.gate_proj.deq_scale"]

    message = _start(_broken(tmp_path, "w8a8", edit_tensors=drop))
    assert "Checkpoint has no tensor model.layers.0.mlp.gate_proj.deq_scale" in message
    assert "a W8A8 layer needs" in message


def test_a_quantized_lm_head_is_refused(tmp_path: Path) -> None:
    def quantize_head(d: dict[str, Any]) -> None:
        d["lm_head.weight"] = "W8A8_DYNAMIC"

    message = _start(_broken(tmp_path, "w8a8_dynamic", edit_description=quantize_head))
    assert "Layer lm_head: quant_model_description.json says lm_head.weight is W8A8_DYNAMIC" in (
        message
    )


EXPERTS = "model.layers.1.mlp.experts"


def _broken_moe(tmp_path: Path, **edits: Any) -> str:
    return _broken(tmp_path, "w8a8_dynamic", style="qwen3_moe", **edits)


def test_an_expert_weight_the_description_does_not_name(tmp_path: Path) -> None:
    def drop(d: dict[str, Any]) -> None:
        del d[f"{EXPERTS}.5.down_proj.weight"]

    message = _start(_broken_moe(tmp_path, edit_description=drop))
    assert (f"MoE layer {EXPERTS}: quant_model_description.json has no entry "
            f"{EXPERTS}.5.down_proj.weight") in message


def test_experts_of_one_layer_with_different_schemes(tmp_path: Path) -> None:
    def mix(d: dict[str, Any]) -> None:
        d[f"{EXPERTS}.3.up_proj.weight"] = "FLOAT"

    message = _start(_broken_moe(tmp_path, edit_description=mix))
    assert (f"MoE layer {EXPERTS}: its experts have different schemes "
            f"({EXPERTS}.0.gate_proj.weight=W8A8_DYNAMIC, {EXPERTS}.3.up_proj.weight=FLOAT)"
            ) in message


def test_a_float_expert_weight_where_int8_is_described(tmp_path: Path) -> None:
    def to_float(t: dict[str, Any]) -> None:
        name = f"{EXPERTS}.6.up_proj.weight"
        t[name] = t[name].float()

    message = _start(_broken_moe(tmp_path, edit_tensors=to_float))
    assert (f"Checkpoint tensor {EXPERTS}.6.up_proj.weight is float32, but a "
            "W8A8_DYNAMIC layer stores weight as int8") in message


def test_an_expert_scale_of_the_wrong_dtype(tmp_path: Path) -> None:
    def to_int(t: dict[str, Any]) -> None:
        name = f"{EXPERTS}.2.gate_proj.weight_scale"
        import torch

        t[name] = t[name].to(torch.int32)

    message = _start(_broken_moe(tmp_path, edit_tensors=to_int))
    assert (f"Checkpoint tensor {EXPERTS}.2.gate_proj.weight_scale is int32, but a "
            "W8A8_DYNAMIC layer stores weight_scale as float32") in message


def test_an_expert_tensor_the_scheme_needs_is_missing(tmp_path: Path) -> None:
    def drop(t: dict[str, Any]) -> None:
        del t[f"{EXPERTS}.4.down_proj.weight_offset"]

    message = _start(_broken_moe(tmp_path, edit_tensors=drop))
    assert f"Checkpoint has no tensor {EXPERTS}.4.down_proj.weight_offset" in message
    assert "a W8A8_DYNAMIC layer needs" in message


def test_a_per_group_w8a16_scale_is_refused_naming_the_tensor(tmp_path: Path) -> None:
    def per_group(t: dict[str, Any]) -> None:  # [n, 1] -> [n, k / 32], as per-group writes
        for suffix in ("weight_scale", "weight_offset"):
            name = f"model.layers.0.mlp.down_proj.{suffix}"
            k = t["model.layers.0.mlp.down_proj.weight"].shape[1]
            t[name] = t[name].repeat(1, k // 32).contiguous()

    message = _start(_broken(tmp_path, "w8a16", edit_tensors=per_group))
    # Whichever of the two loads first is named.
    assert "Checkpoint tensor model.layers.0.mlp.down_proj.weight_" in message
    assert "(128, 12): a per-group W8A16" in message
    assert "serves W8A16 per channel only" in message


def test_w4a8_experts_with_unpacked_weights_are_refused_naming_the_tensor(
        tmp_path: Path) -> None:
    def unpacked(t: dict[str, Any]) -> None:  # one int4 per byte, [out, in]
        name = f"{EXPERTS}.1.gate_proj.weight"
        t[name] = t[name].repeat(2, 1).contiguous()

    message = _start(_broken(tmp_path, "w4a8_dynamic", style="qwen3_moe",
                             edit_tensors=unpacked))
    assert (f"Checkpoint tensor {EXPERTS}.1.gate_proj.weight is [64, 128], but a "
            "W4A8_DYNAMIC expert stores weight as [32, 128] (int4 pairs in int8") in message


def test_w4a8_experts_with_a_wrong_scale_bias_are_refused_naming_it(tmp_path: Path) -> None:
    def wrong(t: dict[str, Any]) -> None:  # the NPU kernel would add this to its sums
        t[f"{EXPERTS}.3.down_proj.scale_bias"][5, 2] += 1.0

    message = _start(_broken(tmp_path, "w4a8_dynamic", style="qwen3_moe", edit_tensors=wrong))
    assert (f"Checkpoint tensor {EXPERTS}.3.down_proj.scale_bias does not fit its weight: "
            "output channel 5 holds") in message


def test_w4a8_linears_with_unpacked_weights_are_refused_naming_the_tensor(
        tmp_path: Path) -> None:
    def unpacked(t: dict[str, Any]) -> None:  # one int4 per byte, [out, in] (pre-1.0.0)
        name = "model.layers.1.self_attn.k_proj.weight"
        t[name] = t[name].repeat(2, 1).contiguous()

    message = _start(_broken(tmp_path, "w4a8_dynamic", edit_tensors=unpacked))
    assert ("Checkpoint tensor model.layers.1.self_attn.k_proj.weight is [64, 128], but a "
            "W4A8_DYNAMIC column-parallel layer stores weight as [32, 128] (int4 pairs in "
            "int8") in message


def test_w4a8_linears_with_a_wrong_scale_bias_are_refused_naming_it(tmp_path: Path) -> None:
    def wrong(t: dict[str, Any]) -> None:  # the NPU kernel would add this to its sums
        t["model.layers.0.mlp.up_proj.scale_bias"][7, 0] += 1.0

    message = _start(_broken(tmp_path, "w4a8_dynamic", edit_tensors=wrong))
    assert ("Checkpoint tensor model.layers.0.mlp.up_proj.scale_bias does not fit its "
            "weight: output channel 7 (of this rank's shard) holds") in message
