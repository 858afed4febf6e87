"""Per-chip roofline: the upper bound of decode and prefill tokens per second of a model
on a chip family, from published chip figures kept with their sources."""

from __future__ import annotations

from ascend_core.roofline.bound import (
    DEFAULT_BATCHES,
    DecodeRow,
    PrefillBound,
    Resource,
    Setup,
    decode_row,
    experts_touched,
    held_weight_bytes,
    prefill_bound,
)
from ascend_core.roofline.chips import CHIPS, ChipFigures, Figure, chip_figures
from ascend_core.roofline.shape import ModelShape, model_shape
from ascend_core.roofline.weights import WeightFormat, weight_format

__all__ = [
    "CHIPS",
    "DEFAULT_BATCHES",
    "ChipFigures",
    "DecodeRow",
    "Figure",
    "ModelShape",
    "PrefillBound",
    "Resource",
    "Setup",
    "WeightFormat",
    "chip_figures",
    "decode_row",
    "experts_touched",
    "held_weight_bytes",
    "model_shape",
    "prefill_bound",
    "weight_format",
]
