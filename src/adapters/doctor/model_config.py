"""A model's config.json -> the core's ModelFacts, the way vLLM reads the same keys.

The doctor reads the file itself because building vLLM's ModelConfig starts a
subprocess to inspect the architecture, which is slow and needs a platform.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ascend_core.deployment import MlaShape, ModelFacts
from ascend_core.errors import ConfigError

_MOE_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    # Multimodal models nest the language model's settings under text_config.
    text = config.get("text_config")
    if isinstance(text, Mapping) and "num_hidden_layers" in text:
        return {**config, **text}
    return config


def _int(config: Mapping[str, Any], key: str, location: str) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"{location}/config.json: {key} is {value!r}, not a positive integer.",
            "use the config.json the model was published with",
        )
    return value


def model_dtype(config: Mapping[str, Any], dtype_arg: str) -> str:
    """vLLM's --dtype auto: the checkpoint's dtype, except float32 is served as bfloat16."""
    if dtype_arg and dtype_arg != "auto":
        return {"half": "float16", "float": "float32"}.get(dtype_arg, dtype_arg)
    raw = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    raw = raw.removeprefix("torch.")
    return "bfloat16" if raw == "float32" else raw


def derived_max_len(config: Mapping[str, Any]) -> int:
    """The longest context the config allows: max_position_embeddings, stretched by a yarn
    or dynamic rope_scaling factor as vLLM does."""
    base = int(config.get("max_position_embeddings") or 4096)
    scaling = config.get("rope_scaling") or config.get("rope_parameters")
    if isinstance(scaling, Mapping):
        kind = scaling.get("rope_type") or scaling.get("type")
        factor = scaling.get("factor")
        if isinstance(factor, (int, float)) and factor > 1:
            if kind == "yarn":
                original = scaling.get("original_max_position_embeddings") or base
                return int(int(original) * factor)
            if kind == "dynamic":
                return int(base * factor)
    return base


def model_facts(
    config: Mapping[str, Any],
    location: str,
    dtype_arg: str = "auto",
    max_model_len: int | None = None,
) -> ModelFacts:
    """The facts the plan, the attention choice and the memory budget need."""
    c = _text_config(config)
    hidden = _int(c, "hidden_size", location)
    heads = _int(c, "num_attention_heads", location)
    kv_heads = int(c.get("num_key_value_heads") or heads)
    head_dim = int(c.get("head_dim") or hidden // heads)
    mla = None
    if c.get("kv_lora_rank") is not None:
        mla = MlaShape(int(c["kv_lora_rank"]), int(c.get("qk_rope_head_dim") or 0))
        head_dim = mla.kv_lora_rank + mla.qk_rope_head_dim  # what vLLM's MLA caches per token
    archs = c.get("architectures") or ["unknown"]
    return ModelFacts(
        architecture=str(archs[0]),
        model_type=str(c.get("model_type", "")),
        hidden_size=hidden,
        num_layers=_int(c, "num_hidden_layers", location),
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_size=head_dim,
        dtype=model_dtype(c, dtype_arg),
        max_model_len=max_model_len or derived_max_len(c),
        mla=mla,
        index_topk=c.get("index_topk"),
        is_moe=any(int(c.get(k) or 0) > 0 for k in _MOE_KEYS),
    )
