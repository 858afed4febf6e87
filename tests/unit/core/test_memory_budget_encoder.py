"""The vision tower's encoder budget: vLLM's rules for the largest item, the cache and the
profiled items (the live engine's numbers: test_qwen_vl_generate.py)."""

from __future__ import annotations

from ascend_core.memory_budget import (
    ACTIVATION_FACTOR,
    PIXEL_NORM_BYTES,
    Reserve,
    VisionGrid,
    encoder_budget,
)

QWEN25 = {"image_processor": {"patch_size": 14, "merge_size": 2, "temporal_patch_size": 2,
                              "size": {"longest_edge": 16384, "shortest_edge": 1024}}}


def test_the_grid_reads_the_processor_config_and_refuses_other_kinds() -> None:
    grid = VisionGrid.from_processor_config(QWEN25)
    assert grid == VisionGrid(14, 2, 2, 16384)
    assert VisionGrid.from_processor_config({"image_processor": {"size": {"height": 224}}}) is None


def test_the_largest_image_is_the_most_merged_patches_at_a_ratio_of_at_most_200() -> None:
    assert VisionGrid(14, 2, 2, 16384).max_image_tokens() == 16384 // 28**2  # 20 = 4 x 5
    # 211 merged patches (a prime) only as 1 x 211: too thin, so 210 = 14 x 15.
    assert VisionGrid(14, 2, 2, 211 * 28 * 28).max_image_tokens() == 210


def test_a_video_takes_the_frames_that_fit_the_sequence_at_most_14() -> None:
    grid = VisionGrid(14, 2, 2, 16384)  # 20 tokens a temporal patch of 2 frames
    assert grid.max_video_tokens(512) == 7 * 20  # 14 frames
    assert grid.max_video_tokens(65) == 3 * 20  # 6 frames: 60 tokens


def test_the_cache_is_the_batch_budget_or_the_largest_item_and_counts_the_outputs() -> None:
    grid = VisionGrid(14, 2, 2, 16384)
    b = encoder_budget(grid, {"image": 2, "video": 0}, 512, 64, 4, 128, 64, 4)
    assert b is not None
    assert (b.max_tokens_per_item, b.cache_tokens, b.profile_items) == ({"image": 20}, 64, 3)
    assert b.cache_bytes == 64 * 128 * 4
    assert b.activation_bytes == 3 * 20 * 4 * ACTIVATION_FACTOR * 64 * 4
    small = encoder_budget(grid, {"video": 0}, 512, 16, 1, 128, 64, 4)
    assert small is not None and (small.cache_tokens, small.profile_items) == (20, 1)
    assert encoder_budget(grid, {"image": 0, "video": 0}, 512, 64, 4, 128, 64, 4) is None


def test_the_reserve_adds_the_encoder_and_says_so() -> None:
    reserve = Reserve(1 << 30, 1 << 20, encoder_bytes=3 << 20)
    assert reserve.total_bytes == (1 << 30) + (4 << 20)
    assert "3.0 MiB encoder cache and tower activations" in reserve.describe()
    assert "encoder" not in Reserve(1 << 30, 1 << 20).describe()


def test_the_towers_peak_is_its_layers_or_its_float32_pixel_normalization() -> None:
    grid = VisionGrid(14, 2, 2, 16384)
    patches = 3 * 20 * 4  # the profiled items' patches
    values = 3 * 2 * 14 * 14  # channels x frames x pixels of one patch
    narrow = encoder_budget(grid, {"image": 2, "video": 0}, 512, 64, 4, 128, 64, 2, values)
    assert narrow is not None  # 8 B x 1176 values beat 12 x 64 x 2 B
    assert narrow.activation_bytes == patches * PIXEL_NORM_BYTES * values
    wide = encoder_budget(grid, {"image": 2, "video": 0}, 512, 64, 4, 128, 1280, 2, values)
    assert wide is not None  # a published tower: its layers
    assert wide.activation_bytes == patches * ACTIVATION_FACTOR * 1280 * 2
