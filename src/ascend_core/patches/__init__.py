"""Upstream patches as data: the registry, the plan for a deployment, and the drift check."""

from ascend_core.patches.context import context_for, device_context
from ascend_core.patches.drift import Drift, check_drift
from ascend_core.patches.entries import ENTRIES, REGISTRY
from ascend_core.patches.selection import (
    PatchPlan,
    PlannedPatch,
    SkipCause,
    SkippedPatch,
    parse_vllm_version,
    plan_patches,
)
from ascend_core.patches.spec import (
    ALWAYS,
    Condition,
    Feature,
    PatchContext,
    PatchRegistry,
    PatchSpec,
)
from ascend_core.versions import Version, VersionRange

__all__ = [
    "ALWAYS",
    "ENTRIES",
    "REGISTRY",
    "Condition",
    "Drift",
    "Feature",
    "PatchContext",
    "PatchPlan",
    "PatchRegistry",
    "PatchSpec",
    "PlannedPatch",
    "SkipCause",
    "SkippedPatch",
    "Version",
    "VersionRange",
    "check_drift",
    "context_for",
    "device_context",
    "parse_vllm_version",
    "plan_patches",
]
