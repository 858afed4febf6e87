"""A model's config.json (a plain mapping) -> ModelFacts, read the way vLLM 0.33 reads it.

For callers that have the file but not vLLM's ModelConfig (building one starts a
subprocess and needs a platform): the doctor, and anything embedding the core.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ascend_core.deployment import MlaShape, ModelFacts
from ascend_core.errors import ConfigError

# The keys vLLM's config aliases read, in its order of preference.
KV_HEAD_KEYS = (
    "n_head_kv",  # Falcon
    "num_kv_heads",
    "num_key_value_heads",  # Llama, Qwen, DeepSeek
    "multi_query_group_num",  # ChatGLM
    "num_attention_groups",
)
# The experts each token is routed to, as MoE configs name it.
TOP_K_KEYS = ("num_experts_per_tok", "moe_topk", "top_k_experts", "num_experts_per_token")
EXPERT_KEYS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")
# vLLM takes the smallest of these present; model_max_length, if set, wins outright.
MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# vLLM's length when the config names none of MAX_LEN_KEYS.
DEFAULT_MAX_LEN = 2048
# RoPE types whose max_position_embeddings is already the stretched length (vLLM 0.33
# applies no factor for them); any other type with a factor multiplies it.
_PRESCALED_ROPE = frozenset(
    {"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"}
)
_DTYPE_ALIASES = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16"}


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's settings: a multimodal config nests them under text_config
    (its own keys win; the outer ones, e.g. architectures, stay visible)."""
    text = config.get("text_config")
    if isinstance(text, Mapping) and "num_hidden_layers" in text:
        merged = {**config, **text}
        if not text.get("architectures"):  # transformers writes null there: the outer list
            merged["architectures"] = config.get("architectures")
        return merged
    return config


def model_dtype(config: Mapping[str, Any], dtype_arg: str = "auto") -> str:
    """vLLM's --dtype: auto serves the checkpoint's dtype, except float32 as bfloat16."""
    if dtype_arg and dtype_arg != "auto":
        return _DTYPE_ALIASES.get(dtype_arg, dtype_arg)
    raw = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    raw = raw.removeprefix("torch.")
    return "bfloat16" if raw == "float32" else raw


def derived_max_len(config: Mapping[str, Any]) -> int:
    """The longest context the config allows, before --max-model-len."""
    lengths = [v for k in MAX_LEN_KEYS if (v := _as_int(config.get(k))) is not None]
    length = min(lengths, default=DEFAULT_MAX_LEN)
    explicit = _as_int(config.get("model_max_length"))
    if explicit is not None:
        length = explicit  # Command-R style: the model's own statement of its length
    scaling = config.get("rope_scaling") or config.get("rope_parameters")
    if isinstance(scaling, Mapping) and "gemma3" not in str(config.get("model_type", "")):
        kind = scaling.get("rope_type") or scaling.get("type")
        factor = scaling.get("factor")
        if kind not in _PRESCALED_ROPE and isinstance(factor, (int, float)) and factor > 0:
            return int(length * factor)
    return length


def max_model_len_error(
    config: Mapping[str, Any], requested: int | None, allow_long: bool, source: str
) -> ConfigError | None:
    """vLLM's rule for --max-model-len beyond what the config allows (refused unless
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1), so the doctor refuses what `vllm serve` refuses."""
    c = text_config(config)
    derived = derived_max_len(c)
    explicit = _as_int(c.get("model_max_length"))
    if requested is None or requested <= derived or allow_long:
        return None
    if explicit is not None and requested <= explicit:
        return None
    return ConfigError(
        f"--max-model-len {requested} is greater than the {derived} tokens {source} allows "
        "(max_position_embeddings, rope scaling, model_max_length); vLLM refuses it.",
        f"Use --max-model-len {derived} or less, or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 if the "
        "model truly handles longer positions.",
    )


def model_facts_from_config(
    config: Mapping[str, Any],
    source: str = "config.json",
    dtype: str = "auto",
    max_model_len: int | None = None,
) -> ModelFacts:
    """The facts the plan, the attention choice and the memory budget need.

    source: where the config came from, named in errors (e.g. "/models/x/config.json").
    dtype, max_model_len: the --dtype and --max-model-len given, if any.
    Raises ConfigError naming the key when a required number is missing or not positive.
    """
    c = text_config(config)
    hidden = _required(c, "hidden_size", source)
    heads = _required(c, "num_attention_heads", source)
    mla = _mla(c, source)
    archs = c.get("architectures") or ["unknown"]
    vision_heads, vision_head_size = _vision_attention(config)
    return ModelFacts(
        architecture=str(archs[0]),
        model_type=str(c.get("model_type", "")),
        hidden_size=hidden,
        num_layers=_required(c, "num_hidden_layers", source),
        num_attention_heads=heads,
        num_kv_heads=_first_positive(c, KV_HEAD_KEYS) or heads,
        head_size=_head_size(c, hidden, heads, mla, source),
        dtype=model_dtype(c, dtype),
        max_model_len=max_model_len or derived_max_len(c),
        mla=mla,
        index_topk=_first_positive(c, ("index_topk",)),
        index_head_dim=_first_positive(c, ("index_head_dim",)) or 128,
        is_moe=_first_positive(c, EXPERT_KEYS) is not None,
        num_experts=_first_positive(c, EXPERT_KEYS) or 0,
        experts_per_token=_first_positive(c, TOP_K_KEYS) or 0,
        compressed_attention=str(archs[0]) in COMPRESSED_MLA_ARCHITECTURES,
        hybrid=config_is_hybrid(config),
        attention_layers=_attention_layers(c),
        sliding_window=_sliding_window(c),
        attention_sinks=str(archs[0]) in SINK_ARCHITECTURES,
        encoder_decoder=bool(config.get("is_encoder_decoder") or c.get("is_encoder_decoder")),
        **_towers(config),
        vision_heads=vision_heads,
        vision_head_size=vision_head_size,
    )


def config_is_hybrid(config: Mapping[str, Any]) -> bool:
    """Whether a model's config.json mixes attention with mamba/linear-attention layers."""
    return _layer_kinds(text_config(config)) & HYBRID_LAYER_KINDS != set()


# Layer kinds other than full attention that make a model hybrid (mamba, linear attention).
HYBRID_LAYER_KINDS = frozenset({"mamba", "mamba2", "linear_attention", "hybrid"})
# Hybrid architectures whose linear-attention layers are gated delta nets the plugin serves
# (its GDN ops and state cache); other hybrid models (mamba, other linear attention) are not.
# Qwen3.5's text models are Qwen3-Next's layout with the GDN's input projections stored apart
# (vLLM's loader stacks them into the same layer).
GATED_DELTA_NET_ARCHITECTURES = frozenset(
    {"Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"}
)
# Hybrid architectures whose linear-attention layers are Kimi delta attention (KDA: the gated
# delta rule with a gate per key channel) the plugin serves on the same ops and state cache.
KIMI_DELTA_ATTENTION_ARCHITECTURES = frozenset({"KimiLinearForCausalLM"})
# Architectures that compress their latent KV cache behind an indexer.
COMPRESSED_MLA_ARCHITECTURES = frozenset({"DeepseekV4ForCausalLM"})
# Architectures whose attention layers carry learned sink logits.
SINK_ARCHITECTURES = frozenset({"GptOssForCausalLM"})
# Top-level config keys of a tower that feeds the language model, by kind.
VISION_KEYS = ("vision_config", "visual", "vision_tower")
AUDIO_KEYS = ("audio_config", "audio_tower", "audio_encoder")
# Keys naming the video placeholder token: the vision tower also takes video.
VIDEO_TOKEN_KEYS = ("video_token_id", "video_token_index")
MULTIMODAL_KEYS = VISION_KEYS + AUDIO_KEYS


def _towers(config: Mapping[str, Any]) -> dict[str, bool]:
    """Which towers feed the language model, read from the outer config (an omni model's
    thinker nests them one level down, under thinker_config)."""
    thinker = config.get("thinker_config")
    scopes = [config, thinker] if isinstance(thinker, Mapping) else [config]

    def has(keys: tuple[str, ...]) -> bool:
        return any(scope.get(key) is not None for scope in scopes for key in keys)

    vision = has(VISION_KEYS)
    return {"vision": vision, "video": vision and has(VIDEO_TOKEN_KEYS), "audio": has(AUDIO_KEYS)}


# The vision tower's head count and width, as ViT configs name them (Qwen2.5/3-VL: num_heads
# with hidden_size; Qwen2-VL: embed_dim, its hidden_size being the language model's;
# SigLIP/CLIP-style: num_attention_heads).
VISION_HEAD_KEYS = ("num_heads", "num_attention_heads")
VISION_HIDDEN_KEYS = ("embed_dim", "hidden_size")


def _vision_attention(config: Mapping[str, Any]) -> tuple[int, int]:
    """The vision tower's heads and head size (0, 0 when its config does not say)."""
    thinker = config.get("thinker_config")
    scopes = [config, thinker] if isinstance(thinker, Mapping) else [config]
    vision = next((s.get("vision_config") for s in scopes
                   if isinstance(s.get("vision_config"), Mapping)), None)
    if vision is None:
        return 0, 0
    heads = _first_positive(vision, VISION_HEAD_KEYS) or 0
    hidden = _first_positive(vision, VISION_HIDDEN_KEYS) or 0
    size = _first_positive(vision, ("head_dim",)) or (hidden // heads if heads else 0)
    return (heads, size) if heads and size else (0, 0)


def _layer_types(c: Mapping[str, Any]) -> Any:
    """The config's list of layer kinds: layer_types (layers_block_type), or for Kimi-Linear's
    published configs its linear_attn_config's 1-based kda_layers and full_attn_layers."""
    kinds = c.get("layer_types") or c.get("layers_block_type")
    if kinds:
        return kinds
    linear = c.get("linear_attn_config")
    if not isinstance(linear, Mapping) or not linear.get("kda_layers"):
        return ()
    kda = {_as_int(n) for n in linear.get("kda_layers") or ()}
    layers = _as_int(c.get("num_hidden_layers")) or 0
    return ["linear_attention" if n + 1 in kda else "full_attention" for n in range(layers)]


def _attention_layers(c: Mapping[str, Any]) -> int | None:
    """Hybrid models: the number of full-attention layers their layer_types list."""
    kinds = _layer_types(c)
    if not isinstance(kinds, (list, tuple)) or not set(map(str, kinds)) & HYBRID_LAYER_KINDS:
        return None
    count = sum(str(k) in ("full_attention", "attention") for k in kinds)
    return count or None


def _layer_kinds(c: Mapping[str, Any]) -> set[str]:
    kinds = _layer_types(c)
    return {str(k) for k in kinds} if isinstance(kinds, (list, tuple)) else set()


def _sliding_window(c: Mapping[str, Any]) -> bool:
    """Some layers attend over a window: a window size in use, or sliding layer kinds."""
    if "sliding_attention" in _layer_kinds(c):
        return True
    window = _as_int(c.get("sliding_window"))
    return window is not None and window > 0 and c.get("use_sliding_window", True) is not False


def _mla(c: Mapping[str, Any], source: str) -> MlaShape | None:
    # DeepSeek-style latent attention; the config names its latent rank.
    if c.get("kv_lora_rank") is None:
        return _compressed_mla(c, source)
    raw = c.get("qk_rope_head_dim") or 0
    rope = _as_int(raw)
    if rope is None or rope < 0:
        raise ConfigError(
            f"{source}: qk_rope_head_dim is {raw!r}, not a non-negative integer.",
            "use the config.json the model was published with",
        )
    return MlaShape(
        _required(c, "kv_lora_rank", source),
        rope,
        qk_nope_head_dim=_as_int(c.get("qk_nope_head_dim") or 0) or 0,
        v_head_dim=_as_int(c.get("v_head_dim") or 0) or 0,
    )


def _compressed_mla(c: Mapping[str, Any], source: str) -> MlaShape | None:
    """DeepSeek-V4 names no kv_lora_rank: its one shared KV head (K = V) of head_dim is the
    latent vLLM caches (vLLM counts the model as MLA), rope on its last qk_rope_head_dim
    (or head_dim x partial_rotary_factor) channels."""
    if str((c.get("architectures") or [""])[0]) not in COMPRESSED_MLA_ARCHITECTURES:
        return None
    head_dim = _required(c, "head_dim", source)
    factor = c.get("partial_rotary_factor")
    rope = _as_int(c.get("qk_rope_head_dim")) or (
        int(head_dim * factor) if isinstance(factor, (int, float)) and factor > 0 else 64
    )
    if not 0 < rope < head_dim:
        raise ConfigError(
            f"{source}: the rotary part ({rope}) of head_dim {head_dim} is not smaller than "
            "the head.",
            "use the config.json the model was published with",
        )
    return MlaShape(head_dim - rope, rope)


def _head_size(
    c: Mapping[str, Any], hidden: int, heads: int, mla: MlaShape | None, source: str
) -> int:
    if mla is not None:
        return mla.kv_lora_rank + mla.qk_rope_head_dim  # what MLA caches per token and layer
    explicit = _first_positive(c, ("head_dim", "hidden_size_per_head"))
    if explicit is None and hidden < heads:
        raise ConfigError(
            f"{source}: hidden_size {hidden} is smaller than num_attention_heads {heads} "
            "and no head_dim is given.",
            "use the config.json the model was published with",
        )
    return explicit or hidden // heads


def _as_int(value: Any) -> int | None:
    """An integer from JSON (never a bool, which Python counts as one), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _first_positive(c: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = c.get(key)
        if isinstance(value, list) and value:  # some configs list one value per layer
            value = value[0]
        number = _as_int(value)
        if number is not None and number > 0:
            return number
    return None


def _required(c: Mapping[str, Any], key: str, source: str) -> int:
    value = c.get(key)
    number = _as_int(value)
    if number is None or number < 1:
        raise ConfigError(
            f"{source}: {key} is {value!r}, not a positive integer.",
            "use the config.json the model was published with",
        )
    return number
