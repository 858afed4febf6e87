"""The vision tower's encoder cache and activations for the memory section, read from the
model's config.json (vision_config) and its processor's config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.doctor.plan.batch import serve_max_num_batched_tokens, serve_max_num_seqs
from adapters.doctor.serve_args import ServeArgs
from ascend_core.deployment import ModelFacts
from ascend_core.memory_budget import EncoderBudget, VisionGrid, dtype_bytes, encoder_budget
from ports.model_files import ModelFiles

PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")


def _limits(raw: Mapping[str, Any]) -> dict[str, int]:
    """--limit-mm-per-prompt as items per modality ({"image": 2} or {"image": {"count": 2}})."""
    out = {}
    for modality, value in raw.items():
        count = value.get("count") if isinstance(value, Mapping) else value
        if isinstance(count, int):
            out[str(modality)] = count
    return out


def encoder_items(
    args: ServeArgs, files: ModelFiles, model: ModelFacts, device_memory_bytes: int
) -> EncoderBudget | None:
    """vLLM's encoder budget for a Qwen2-VL-style vision tower; None for a model without
    one, one its processor config does not describe, or --language-model-only."""
    config = files.read_json("config.json") or {}
    vision = config.get("vision_config")
    if args.language_model_only or not isinstance(vision, Mapping):
        return None
    grid = next(
        (g for name in PROCESSOR_FILES
         if (p := files.read_json(name)) and (g := VisionGrid.from_processor_config(p))),
        None,
    )
    vision_hidden = vision.get("embed_dim", vision.get("hidden_size"))  # Qwen2-VL: embed_dim
    if grid is None or not isinstance(vision_hidden, int):
        return None
    # Qwen3-VL's tower outputs its DeepStack features beside the merged ones, each at the
    # language model's hidden size, and the encoder cache holds them all.
    deepstack = vision.get("deepstack_visual_indexes") or ()
    # The pixel values of one patch (channels x frames x pixels), which vLLM normalizes
    # on the device before the tower's layers.
    channels = vision.get("in_channels", vision.get("in_chans", 3))
    patch_values = (channels if isinstance(channels, int) else 3) * (
        grid.temporal_patch_size * grid.patch_size**2)
    return encoder_budget(
        grid,
        _limits(args.limit_mm_per_prompt),
        model.max_model_len,
        serve_max_num_batched_tokens(args, device_memory_bytes),
        serve_max_num_seqs(args, device_memory_bytes),
        model.hidden_size * (1 + len(deepstack)),
        vision_hidden,
        dtype_bytes(model.dtype),
        patch_values,
    )
