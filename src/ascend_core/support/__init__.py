"""What this build serves: model features x device -> supported, or refused with a reason."""

from ascend_core.support.check import features_of, refusals
from ascend_core.support.features import Feature
from ascend_core.support.matrix import MATRIX, Refused, Supported, Verdict, verdict

__all__ = [
    "MATRIX",
    "Feature",
    "Refused",
    "Supported",
    "Verdict",
    "features_of",
    "refusals",
    "verdict",
]
