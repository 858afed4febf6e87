"""Config files and safetensors headers of large real architectures, without any weights.

LLAMA_70B mirrors Llama-3-70B; DEEPSEEK_V3 mirrors DeepSeek-V3 exported by ModelSlim as
W8A8_DYNAMIC (int8 linear weights; embeddings, norms and the router stay bfloat16).
Routed experts are written as one stacked tensor per layer and projection, and the
float32 per-channel scales are left out, to keep the header small; the byte totals
below count exactly what the headers hold.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ports.model_files import TensorHeader

LLAMA_70B_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-05,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 128000,
    "eos_token_id": 128009,
}


def llama_70b_headers() -> tuple[TensorHeader, ...]:
    h, inter, kv = 8192, 28672, 8 * 128
    out = [
        TensorHeader("model.embed_tokens.weight", "BF16", (128256, h)),
        TensorHeader("lm_head.weight", "BF16", (128256, h)),
        TensorHeader("model.norm.weight", "BF16", (h,)),
    ]
    for i in range(80):
        p = f"model.layers.{i}."
        out += [
            TensorHeader(p + "self_attn.q_proj.weight", "BF16", (h, h)),
            TensorHeader(p + "self_attn.k_proj.weight", "BF16", (kv, h)),
            TensorHeader(p + "self_attn.v_proj.weight", "BF16", (kv, h)),
            TensorHeader(p + "self_attn.o_proj.weight", "BF16", (h, h)),
            TensorHeader(p + "mlp.gate_proj.weight", "BF16", (inter, h)),
            TensorHeader(p + "mlp.up_proj.weight", "BF16", (inter, h)),
            TensorHeader(p + "mlp.down_proj.weight", "BF16", (h, inter)),
            TensorHeader(p + "input_layernorm.weight", "BF16", (h,)),
            TensorHeader(p + "post_attention_layernorm.weight", "BF16", (h,)),
        ]
    return tuple(out)


DEEPSEEK_V3_CONFIG: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 3,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "rope_scaling": {
        "type": "yarn",
        "factor": 40,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
    "rope_theta": 10000,
    "rms_norm_eps": 1e-06,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def _deepseek_layer(i: int) -> list[tuple[str, str, tuple[int, ...]]]:
    h, heads = 7168, 128
    p = f"model.layers.{i}."
    rows = [
        (p + "self_attn.q_a_proj.weight", "I8", (1536, h)),
        (p + "self_attn.q_a_layernorm.weight", "BF16", (1536,)),
        (p + "self_attn.q_b_proj.weight", "I8", (heads * (128 + 64), 1536)),
        (p + "self_attn.kv_a_proj_with_mqa.weight", "I8", (512 + 64, h)),
        (p + "self_attn.kv_a_layernorm.weight", "BF16", (512,)),
        (p + "self_attn.kv_b_proj.weight", "I8", (heads * (128 + 128), 512)),
        (p + "self_attn.o_proj.weight", "I8", (h, heads * 128)),
        (p + "input_layernorm.weight", "BF16", (h,)),
        (p + "post_attention_layernorm.weight", "BF16", (h,)),
    ]
    if i < 3:  # first_k_dense_replace: dense MLP
        rows += [
            (p + "mlp.gate_proj.weight", "I8", (18432, h)),
            (p + "mlp.up_proj.weight", "I8", (18432, h)),
            (p + "mlp.down_proj.weight", "I8", (h, 18432)),
        ]
    else:
        rows += [
            (p + "mlp.gate.weight", "BF16", (256, h)),
            (p + "mlp.gate.e_score_correction_bias", "F32", (256,)),
            (p + "mlp.experts.gate_up_proj.weight", "I8", (256, 2 * 2048, h)),
            (p + "mlp.experts.down_proj.weight", "I8", (256, h, 2048)),
            (p + "mlp.shared_experts.gate_proj.weight", "I8", (2048, h)),
            (p + "mlp.shared_experts.up_proj.weight", "I8", (2048, h)),
            (p + "mlp.shared_experts.down_proj.weight", "I8", (h, 2048)),
        ]
    return rows


def deepseek_v3_headers() -> tuple[TensorHeader, ...]:
    rows = [
        ("model.embed_tokens.weight", "BF16", (129280, 7168)),
        ("lm_head.weight", "BF16", (129280, 7168)),
        ("model.norm.weight", "BF16", (7168,)),
    ]
    for i in range(61):
        rows += _deepseek_layer(i)
    return tuple(TensorHeader(n, d, s) for n, d, s in rows)


def deepseek_v3_description() -> dict[str, str]:
    """ModelSlim's quant_model_description.json: each weight's scheme."""
    description = {"model_quant_type": "W8A8_DYNAMIC", "version": "1.0.0"}
    for header in deepseek_v3_headers():
        description[header.name] = "W8A8_DYNAMIC" if header.dtype == "I8" else "FLOAT"
    return description


_BYTES = {"BF16": 2, "F32": 4, "I8": 1}


def write_header_only_safetensors(path: Path, headers: Iterable[TensorHeader]) -> None:
    """A safetensors file holding only its header: enough for tensor_headers()."""
    offset = 0
    table: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    for h in headers:
        size = _BYTES[h.dtype]
        for d in h.shape:
            size *= d
        table[h.name] = {
            "dtype": h.dtype,
            "shape": list(h.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(table).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


def write_model(
    directory: Path,
    config: dict[str, Any],
    headers: Iterable[TensorHeader],
    description: dict[str, str] | None = None,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    write_header_only_safetensors(directory / "model.safetensors", headers)
    if description is not None:
        (directory / "quant_model_description.json").write_text(json.dumps(description))
    return directory
