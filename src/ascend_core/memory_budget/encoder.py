"""The vision tower's share of memory: vLLM's encoder cache budget (in tokens of the
language model's sequence) and its bytes, and the items the profiling pass encodes at once.

vLLM sizes the encoder cache as max(--max-num-batched-tokens, the most tokens one item can
take) and profiles the tower with as many items of that largest size as the encoder budget
and the decoder's sequences allow; the encoder's outputs are held in the model's dtype at
the language model's hidden size (times 1 + the DeepStack layers for Qwen3-VL: the caller's
`hidden_size`). For a Qwen2-VL-style image processor the largest item
is the most merged patches `size.longest_edge` pixels allow at an aspect ratio of at most
200 (the processor refuses beyond), and a video the most frames (at most 14, padded to the
temporal patch) whose tokens fit in max_model_len.

The tower's activations at the profiling batch are the larger of two peaks per patch:
its layers' (ACTIVATION_FACTOR x its hidden size in the model's dtype) and the pixel
normalization's before them. vLLM 0.33 sends a Qwen-VL tower its pixels raw (uint8,
`mm_device_do_normalize`) and normalizes them on the device in float32 (FusedMMInputNorm's
torch path, the one a plugin device takes: `x * weight + bias` holds two float32 copies of
the patch's channels x frames x pixels together), which outweighs the layers when the
tower is narrow (a small test model's 64-wide tower) and stays below them for the
published ones (Qwen3-VL: 1536 pixel values x 8 B against 12 x 1152 x 2 B).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from attrs import frozen

from ascend_core.memory_budget.reserve import ACTIVATION_FACTOR
from ascend_core.memory_budget.units import format_bytes

MAX_ASPECT_RATIO = 200
# Bytes per pixel value the on-device normalization holds at once: two float32 copies.
PIXEL_NORM_BYTES = 2 * 4
MAX_FRAMES_PER_VIDEO = 14
# vLLM's items per prompt of a modality --limit-mm-per-prompt does not name.
DEFAULT_ITEMS_PER_PROMPT = 999


@frozen
class VisionGrid:
    """A Qwen2-VL-style processor's grid: pixels per side of a patch, patches merged per
    side into one token, frames per temporal patch, and the most pixels an image keeps."""

    patch_size: int
    merge_size: int
    temporal_patch_size: int
    max_pixels: int

    @classmethod
    def from_processor_config(cls, processor: Mapping[str, Any]) -> VisionGrid | None:
        """From processor_config.json (its image_processor) or preprocessor_config.json;
        None when the processor is not of that kind."""
        image = processor.get("image_processor", processor)
        size = image.get("size") if isinstance(image, Mapping) else None
        keys = ("patch_size", "merge_size", "temporal_patch_size")
        if not isinstance(size, Mapping) or not all(isinstance(image.get(k), int) for k in keys):
            return None
        max_pixels = size.get("longest_edge", image.get("max_pixels"))
        if not isinstance(max_pixels, int):
            return None
        return cls(image["patch_size"], image["merge_size"], image["temporal_patch_size"],
                   max_pixels)

    def max_image_tokens(self) -> int:
        """Tokens of the largest image: the most merged patches with a factor pair whose
        aspect ratio is at most 200."""
        unit = self.patch_size * self.merge_size
        for tokens in range(self.max_pixels // (unit * unit), 0, -1):
            short = next(d for d in range(math.isqrt(tokens), 0, -1) if tokens % d == 0)
            if tokens // short / short <= MAX_ASPECT_RATIO:
                return tokens
        return 1

    def video_tokens(self, frames: int) -> int:
        padded = frames + (-frames % self.temporal_patch_size)
        return max(padded // self.temporal_patch_size, 1) * self.max_image_tokens()

    def max_video_tokens(self, max_model_len: int) -> int:
        """Tokens of the largest video: the most frames whose tokens fit in max_model_len
        (at least one), at most 14."""
        frames = 1
        while self.video_tokens(frames + 1) <= max_model_len:
            frames += 1
        return self.video_tokens(min(frames, MAX_FRAMES_PER_VIDEO))


@frozen
class EncoderBudget:
    """The encoder cache vLLM keeps and the items its profiling pass encodes together."""

    max_tokens_per_item: Mapping[str, int]
    cache_tokens: int
    compute_tokens: int
    profile_modality: str
    profile_items: int
    bytes_per_token: int
    activation_bytes: int

    @property
    def cache_bytes(self) -> int:
        return self.cache_tokens * self.bytes_per_token

    @property
    def total_bytes(self) -> int:
        return self.cache_bytes + self.activation_bytes

    def describe(self) -> str:
        per_item = ", ".join(f"{m} {t}" for m, t in sorted(self.max_tokens_per_item.items()))
        return (
            f"encoder cache {self.cache_tokens} tokens x {self.bytes_per_token} B = "
            f"{format_bytes(self.cache_bytes)} (largest item: {per_item} tokens); profiled "
            f"with {self.profile_items} {self.profile_modality} item(s) of the largest size, "
            f"{format_bytes(self.activation_bytes)} tower activations"
        )


def encoder_budget(
    grid: VisionGrid,
    limits: Mapping[str, int],
    max_model_len: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    hidden_size: int,
    vision_hidden_size: int,
    dtype_bytes: int,
    patch_values: int = 0,
) -> EncoderBudget | None:
    """vLLM's budget for the modalities `limits` leaves on (image and video, each at most
    its limit per prompt); None when every modality is off (no encoder cache). The tower's
    activations per patch of the profiled items: the larger of ACTIVATION_FACTOR x its
    hidden size and the pixel normalization's float32 copies of the patch's `patch_values`
    (channels x frames x pixels per patch; 0: not known)."""
    sizes = {"image": grid.max_image_tokens(), "video": grid.max_video_tokens(max_model_len)}
    per_item = {m: t for m, t in sizes.items() if limits.get(m, DEFAULT_ITEMS_PER_PROMPT) > 0}
    if not per_item:
        return None
    largest = max(per_item.values())
    compute = max(max_num_batched_tokens, largest)
    cache = max(max_num_batched_tokens, largest)
    modality, tokens = max(per_item.items(), key=lambda kv: (kv[1], kv[0]))
    limit = limits.get(modality, DEFAULT_ITEMS_PER_PROMPT)
    per_prompt = max(1, min(limit, max_model_len // tokens))
    items = max(1, min(min(compute, cache) // tokens, max_num_seqs * per_prompt))
    patches = items * tokens * grid.merge_size**2
    activations = patches * tower_bytes_per_patch(vision_hidden_size, dtype_bytes, patch_values)
    return EncoderBudget(per_item, cache, compute, modality, items, hidden_size * dtype_bytes,
                         activations)


def tower_bytes_per_patch(vision_hidden_size: int, dtype_bytes: int, patch_values: int) -> int:
    """The tower's peak per patch: its layers' or its pixel normalization's, the larger."""
    return max(ACTIVATION_FACTOR * vision_hidden_size * dtype_bytes,
               PIXEL_NORM_BYTES * patch_values)
