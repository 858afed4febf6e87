"""The functions that apply the core registry's upstream patches, one small module each.

`apply_patch_plan` asks the core which patches this deployment needs and calls each
one's `apply` function (named in the registry) once per process.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ascend_core.patches import PatchPlan, PatchSpec
    from ports.device import DeviceKind

logger = logging.getLogger("vllm.plugins.ascend")

_applied: set[str] = set()


def patch_plan(kind: DeviceKind) -> PatchPlan:
    """The core's patch plan for this device and the installed vLLM."""
    from importlib.metadata import version

    from ascend_core.patches import REGISTRY, Feature, PatchContext, plan_patches
    from ports.device import ChipFamily, DeviceKind

    features: set[Feature] = set()
    if kind is DeviceKind.NPU:
        features.add(Feature.TRITON)  # triton-ascend ships with the NPU stack
    family = ChipFamily.HOST if kind is DeviceKind.CPU else ChipFamily.A2
    return plan_patches(REGISTRY, PatchContext(kind, family, features), version("vllm"))


def apply_one(spec: PatchSpec) -> None:
    if spec.id in _applied:
        return
    module_name, _, func_name = spec.apply.partition(":")
    getattr(importlib.import_module(module_name), func_name)(spec)
    _applied.add(spec.id)
    logger.debug("Applied patch %s: %s", spec.id, spec.reason)


def apply_patch_plan(kind: DeviceKind) -> None:
    """Apply every patch the plan selects; re-entrant."""
    for planned in patch_plan(kind).to_apply:
        apply_one(planned.spec)
