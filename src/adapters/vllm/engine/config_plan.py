"""Asking the core for the config plan of a Deployment."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ascend_core.deployment import Deployment
    from ascend_core.plan.result import ConfigPlan

logger = logging.getLogger("vllm.plugins.ascend")
_noted: set[str] = set()


def plan_for(deployment: Deployment | None) -> ConfigPlan | None:
    """The core's plan (raising its errors together), or None before the model is known."""
    if deployment is None:
        return None
    from ascend_core.plan import plan_config
    from ascend_core.plan.npugraph_ex import npugraph_ex_note

    plan = plan_config(deployment)
    for warning in plan.warnings:
        logger.warning("Ascend plan: %s", warning)
    note = npugraph_ex_note(deployment, plan)
    if note is not None and note not in _noted:  # once per process, as the changes are
        _noted.add(note)
        logger.info("Ascend plan: %s", note)
    return plan.require_ok()
