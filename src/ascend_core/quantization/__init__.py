"""Quantization: which method a model uses, and the ModelSlim scheme of each layer."""

from ascend_core.quantization.detection import (
    CONFIG_FILE,
    DecidedBy,
    Evidence,
    QuantDetection,
    detect_quantization,
)
from ascend_core.quantization.methods import SELECTABLE, UNSUPPORTED, QuantMethod
from ascend_core.quantization.modelslim import (
    DEFAULT_FUSED_SHARDS,
    DESCRIPTION_FILE,
    LayerScheme,
    ModelSlimDescription,
    QuantScheme,
    parse_description,
    scheme_for_layer,
)

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_FUSED_SHARDS",
    "DESCRIPTION_FILE",
    "SELECTABLE",
    "UNSUPPORTED",
    "DecidedBy",
    "Evidence",
    "LayerScheme",
    "ModelSlimDescription",
    "QuantDetection",
    "QuantMethod",
    "QuantScheme",
    "detect_quantization",
    "parse_description",
    "scheme_for_layer",
]
