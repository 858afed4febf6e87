"""The rows of the quantization support table test: one model directory per (format, layer
kind), made from a tiny model by writing the quantization files exports carry (a ModelSlim
description, or config.json's quantization_config as llm-compressor and the FP8 releases
write it). The weights stay the tiny model's float ones: every row is judged before any
weight loads (serve's config phase, the doctor's plan), so they are never read.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

# The keys llm-compressor 0.14 writes for its presets (W4A16, W8A8, FP8_BLOCK, FP8_DYNAMIC).
_W4A16 = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
          "group_size": 32, "dynamic": False, "actorder": None, "observer": "minmax"}
_W4A16_ASYM = {**_W4A16, "symmetric": False}
_INT8_CHANNEL = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
                 "dynamic": False, "observer": "minmax"}
_INT8_TOKEN = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token",
               "dynamic": True, "observer": None}
_FP8_CHANNEL = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel",
                "dynamic": False, "observer": "minmax"}
_FP8_TOKEN = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "token",
              "dynamic": True, "observer": None}
_FP8_BLOCK = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "block",
              "block_structure": [128, 128], "dynamic": False, "observer": "minmax"}
_FP8_GROUP = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "group",
              "group_size": 128, "dynamic": True, "observer": None}


def _ct(fmt: str, weights: dict[str, Any], acts: dict[str, Any] | None,
        targets: list[str] | None = None) -> dict[str, Any]:
    return {
        "quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
        "ignore": ["lm_head"], "kv_cache_scheme": None,
        "config_groups": {"group_0": {"targets": targets or ["Linear"], "weights": weights,
                                      "input_activations": acts, "output_activations": None,
                                      "format": fmt}},
    }


CT_CONFIGS: dict[str, dict[str, Any]] = {
    "ct-int8-w8a8": _ct("int-quantized", _INT8_CHANNEL, _INT8_TOKEN),
    "ct-int8-asym": _ct("int-quantized", _INT8_CHANNEL, {**_INT8_TOKEN, "symmetric": False}),
    "ct-w4a16": _ct("pack-quantized", _W4A16, None),
    "ct-w4a16-asym": _ct("pack-quantized", _W4A16_ASYM, None),
    "ct-fp8-dynamic": _ct("float-quantized", _FP8_CHANNEL, _FP8_TOKEN),
    "ct-fp8-block": _ct("float-quantized", _FP8_BLOCK, _FP8_GROUP),
    # DeepSeek-V3's and Qwen3's official FP8 releases: vLLM's own fp8 method.
    "fp8-block": {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                  "weight_block_size": [128, 128]},
    "fp8-channel": {"quant_method": "fp8", "activation_scheme": "dynamic"},
    # The same with blocks that fit the tiny model (its k/v projections are 64 wide).
    "ct-fp8-block-64": _ct("float-quantized", {**_FP8_BLOCK, "block_structure": [64, 64]},
                           {**_FP8_GROUP, "group_size": 64}),
    "fp8-block-64": {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                     "weight_block_size": [64, 64]},
    # Only the experts block-quantized, in blocks taller than their intermediate size.
    "ct-fp8-block-experts": _ct("float-quantized", _FP8_BLOCK, _FP8_GROUP,
                                ["re:.*mlp\\.experts\\.\\d+\\.(gate|up|down)_proj$"]),
}
MODELSLIM = ("W8A8", "W8A8_DYNAMIC", "W8A16", "W4A8_DYNAMIC")

# (id, tiny model style, how: "modelslim:<SCHEME>:<kind>", "config:<key>" or
# "flag:fp8", whether serve and the doctor accept it)
ROWS: list[tuple[str, str, str, bool]] = [
    ("modelslim W8A8 linear", "llama", "modelslim:W8A8:linear", True),
    ("modelslim W8A8_DYNAMIC linear", "llama", "modelslim:W8A8_DYNAMIC:linear", True),
    ("modelslim W8A16 linear", "llama", "modelslim:W8A16:linear", True),
    ("modelslim W4A8_DYNAMIC linear", "llama", "modelslim:W4A8_DYNAMIC:linear", True),
    ("modelslim W4A8_DYNAMIC per-group linear", "llama", "modelslim:W4A8_DYNAMIC/256:linear",
     False),
    ("modelslim W8A8 experts", "qwen3_moe", "modelslim:W8A8:experts", False),
    ("modelslim W8A8_DYNAMIC experts", "qwen3_moe", "modelslim:W8A8_DYNAMIC:experts", True),
    ("modelslim W8A16 experts", "qwen3_moe", "modelslim:W8A16:experts", False),
    ("modelslim W4A8_DYNAMIC experts", "qwen3_moe", "modelslim:W4A8_DYNAMIC:experts", True),
    ("modelslim W4A8_DYNAMIC per-group experts", "qwen3_moe",
     "modelslim:W4A8_DYNAMIC/256:experts", False),
    ("modelslim quantized lm_head", "llama", "modelslim:W8A8_DYNAMIC:embedding", False),
    ("ct int8 W8A8 linear", "llama", "config:ct-int8-w8a8", True),
    ("ct int8 W8A8 experts", "qwen3_moe", "config:ct-int8-w8a8", False),
    ("ct int8 asymmetric activations", "llama", "config:ct-int8-asym", False),
    ("ct W4A16 linear", "llama", "config:ct-w4a16", True),
    ("ct W4A16 asymmetric linear", "llama", "config:ct-w4a16-asym", True),
    ("ct W4A16 experts", "qwen3_moe", "config:ct-w4a16", True),
    ("ct FP8 dynamic linear", "llama", "config:ct-fp8-dynamic", True),
    ("ct FP8 dynamic experts", "qwen3_moe", "config:ct-fp8-dynamic", True),
    ("ct FP8 block [64, 64] experts", "qwen3_moe", "config:ct-fp8-block-64", True),
    ("ct FP8 block [64, 64] linear", "llama", "config:ct-fp8-block-64", True),
    # [128, 128] blocks do not fit the tiny model's 64-wide k/v shards: refused by the plan.
    ("ct FP8 block linear", "llama", "config:ct-fp8-block", False),
    ("ct FP8 block experts", "qwen3_moe", "config:ct-fp8-block", False),
    # The experts alone: 128-row blocks over a 64-wide intermediate slice.
    ("ct FP8 block experts only", "qwen3_moe", "config:ct-fp8-block-experts", False),
    ("fp8 block [64, 64] linear", "llama", "config:fp8-block-64", True),
    ("fp8 block linear", "llama", "config:fp8-block", False),
    ("fp8 block experts", "qwen3_moe", "config:fp8-block", False),
    ("fp8 block [64, 64] experts", "qwen3_moe", "config:fp8-block-64", True),
    ("fp8 per-channel linear", "llama", "config:fp8-channel", False),
    ("fp8 at load (--quantization fp8)", "llama", "flag:fp8", False),
]  # fmt: skip


def _description(model: Path, scheme: str, kind: str) -> dict[str, Any]:
    """Every tensor of the tiny model described, as ModelSlim's saver writes its keys:
    `scheme` for the weights of `kind`, FLOAT for the rest. `<SCHEME>/<G>`: the
    description's group_size is G (per-group weight scales)."""
    from safetensors import safe_open

    scheme, _, group = scheme.partition("/")
    entries: dict[str, Any] = {"model_quant_type": scheme, "version": "1.0.0"}
    if group:
        entries["group_size"] = int(group)
    for shard in sorted(model.glob("*.safetensors")):
        with safe_open(str(shard), "pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is no mapping)
                is_weight = name.endswith("_proj.weight")
                if ".experts." in name:
                    which = "experts"
                elif "embed_tokens" in name or name.startswith("lm_head"):
                    which = "embedding"
                    is_weight = name.endswith(".weight")
                else:
                    which = "linear"
                entries[name] = scheme if is_weight and which == kind else "FLOAT"
    return entries


def make_row(how: str, base: Path, where: Path) -> tuple[Path, list[str]]:
    """The model directory of one row, and the extra `vllm serve` arguments it needs."""
    kind, _, rest = how.partition(":")
    if kind == "flag":
        return base, ["--quantization", rest]
    out = where / f"{base.name}-{how.replace(':', '-').replace('/', '-g').lower()}"
    if out.exists():
        return out, []
    shutil.copytree(base, out)
    if kind == "modelslim":
        scheme, _, layers = rest.partition(":")
        (out / "quant_model_description.json").write_text(
            json.dumps(_description(out, scheme, layers)))
    else:
        config = json.loads((out / "config.json").read_text())
        config["quantization_config"] = CT_CONFIGS[rest]
        (out / "config.json").write_text(json.dumps(config))
    return out, []
