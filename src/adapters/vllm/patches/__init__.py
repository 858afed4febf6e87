"""The functions that apply the core registry's upstream patches, one small module each.

Two moments, both once per process and re-entrant:
- registration (every vLLM process loads the general plugin): the patches the device
  alone calls for, `device_patch_plan`;
- once the deployment is known (check_and_update_config in the process that builds the
  config, and the worker in its own process): the plan of the whole deployment
  (speculative decoding, hybrid models, ...), `deployment_patch_plan`.
"""

from __future__ import annotations

import logging
from importlib.metadata import version
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ascend_core.deployment import Deployment
    from ascend_core.patches import PatchPlan, PatchSpec
    from ports.device import ChipFamily, DeviceKind

logger = logging.getLogger("vllm.plugins.ascend")

_applied: set[str] = set()


def device_patch_plan(kind: DeviceKind, family: ChipFamily) -> PatchPlan:
    """The core's plan for this device before the model is known."""
    from ascend_core.patches import REGISTRY, device_context, plan_patches

    return plan_patches(REGISTRY, device_context(kind, family), version("vllm"))


def deployment_patch_plan(deployment: Deployment) -> PatchPlan:
    """The core's plan for a known deployment (the doctor plans with the same context)."""
    from ascend_core.patches import REGISTRY, context_for, plan_patches

    return plan_patches(REGISTRY, context_for(deployment), version("vllm"))


def apply_one(spec: PatchSpec) -> None:
    if spec.id in _applied:
        return
    from adapters.vllm.patches.table import function_for

    function_for(spec.id)(spec)
    _applied.add(spec.id)
    logger.debug("Applied patch %s: %s", spec.id, spec.reason)


def apply_plan(plan: PatchPlan) -> None:
    """Apply every patch the plan selects; re-entrant."""
    for planned in plan.to_apply:
        apply_one(planned.spec)
