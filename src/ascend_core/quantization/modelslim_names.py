"""How ModelSlim names a weight, against how vLLM names the layer that holds it.

Facts from vllm_ascend/quantization/modelslim_config.py: AscendModelSlimConfig adds, for each
description key, an alias with `weight_packed` read as `weight` and `.shared_head.` (MTP layers)
dropped; QUANT_MODEL_PREFIX_MAPPINGS maps layer prefixes per model type, and a leading
`language_model.` is stripped for vision-language exports. Models whose full-attention layers
share one tensor for k and v (config `attention_k_eq_v`) have no `v_proj` entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ascend_core.errors import QuantizationError

# (written in the file, read as) substitutions that give a key its alias.
KEY_ALIASES: tuple[tuple[str, str], ...] = (
    ("weight_packed", "weight"),
    (".shared_head.", "."),
)

# model_type -> (prefix as vLLM names it, prefix the export uses), first match wins.
PREFIX_MAPPINGS: Mapping[str, tuple[tuple[str, str], ...]] = MappingProxyType(
    {
        "qwen3_vl_moe": (
            ("visual.", "model.visual."),
            ("language_model.lm_head.", "lm_head."),
            ("language_model.model.", "model.language_model."),
        ),
        "qwen3_vl_text": (
            ("visual.", "model.visual."),
            ("language_model.lm_head.", "lm_head."),
            ("language_model.model.", "model.language_model."),
        ),
        "kimi_k25": (
            ("mm_projector.linear_1", "mm_projector.proj.0"),
            ("mm_projector.linear_2", "mm_projector.proj.2"),
        ),
        "qwen3_omni_moe_thinker": (
            ("thinker.lm_head.", "language_model.lm_head."),
            ("thinker.model.", "language_model.model."),
            ("thinker.", ""),
            ("lm_head.", "language_model.lm_head."),
            ("model.", "language_model.model."),
        ),
        "qwen2_5_omni_thinker": (
            ("thinker.lm_head.", "language_model.lm_head."),
            ("thinker.model.", "language_model.model."),
            ("thinker.", ""),
            ("lm_head.", "language_model.lm_head."),
            ("model.", "language_model.model."),
        ),
    }
)

LANGUAGE_MODEL = "language_model."
# The reference keeps `language_model.` for this model type.
_KEEPS_LANGUAGE_MODEL = frozenset({"kimi_k2"})


def with_aliases(entries: Mapping[str, str], file: str) -> dict[str, str]:
    """`entries` plus the alias of every key that has one.

    An alias that is also written in the file with another scheme is a QuantizationError
    (the reference silently lets the alias win).
    """
    result = dict(entries)
    for key, label in entries.items():
        alias = key
        for written, read_as in KEY_ALIASES:
            alias = alias.replace(written, read_as)
        if alias == key:
            continue
        if alias in entries and entries[alias] != label:
            raise QuantizationError(
                f'{file}: "{key}" is "{label}" but "{alias}", the name it is read as, '
                f'is "{entries[alias]}".',
                "Re-export the model with ModelSlim; one weight has one scheme.",
            )
        result[alias] = label
    return result


def candidate_prefixes(prefix: str, model_type: str | None) -> tuple[str, ...]:
    """The names the export may use for vLLM's layer `prefix`, most direct first."""
    names = [prefix]
    dotted = f"{prefix}."
    for original, exported in PREFIX_MAPPINGS.get(model_type or "", ()):
        if dotted.startswith(original):
            names.append((exported + dotted[len(original) :]).removesuffix("."))
            break
    keeps = model_type in _KEEPS_LANGUAGE_MODEL
    for name in tuple(names):
        if name.startswith(LANGUAGE_MODEL) and not keeps:
            names.append(name.removeprefix(LANGUAGE_MODEL))
        elif not name.startswith(LANGUAGE_MODEL):
            names.append(LANGUAGE_MODEL + name)
    return tuple(dict.fromkeys(n for n in names if n))


def k_eq_v_from_config(config: Mapping[str, Any] | None) -> bool:
    """Whether config.json (or its text_config) says k and v share one tensor."""
    if not isinstance(config, Mapping):
        return False
    text = config.get("text_config")
    nested = text.get("attention_k_eq_v") if isinstance(text, Mapping) else None
    return bool(config.get("attention_k_eq_v") or nested)
