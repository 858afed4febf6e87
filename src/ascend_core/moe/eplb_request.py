"""Whether a deployment asks for EPLB: vLLM's --enable-eplb or the reference's switch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ascend_core.deployment import Deployment


def eplb_requested(deployment: Deployment) -> bool:
    """--enable-eplb, or additional_config.eplb_config.dynamic_eplb=true (which the plan
    serves as vLLM's EPLB)."""
    if deployment.parallel.eplb.enabled:
        return True
    section = deployment.additional_config.get("eplb_config")
    return isinstance(section, Mapping) and section.get("dynamic_eplb") is True
