"""The `patches` section: which registered upstream patches apply to this deployment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.doctor.plan.items import FAIL, PASS, failed
from ascend_core.deployment import Deployment
from ascend_core.errors import AscendError
from ascend_core.patches import REGISTRY, context_for, plan_patches
from ascend_core.preflight import CheckItem
from ports.upstream import Upstream


def patch_items(
    deployment: Deployment, upstream: Upstream
) -> tuple[list[CheckItem], Mapping[str, Any]]:
    """The patches to apply (and why), the ones skipped, and the same as report data."""
    version = upstream.version("vllm")
    if version is None:
        item = CheckItem("patches", FAIL, "vLLM is not installed", "pip install vllm==0.33.0")
        return [item], {}
    context = context_for(deployment)
    try:
        patches = plan_patches(REGISTRY, context, version)
    except AscendError as error:
        return failed("patches", error), {}
    items = [CheckItem(p.spec.id, PASS, p.why) for p in patches.to_apply]
    items.append(
        CheckItem(
            "skipped",
            PASS,
            f"{len(patches.skipped)} registered patch(es) not needed here"
            + (": " + ", ".join(s.spec.id for s in patches.skipped) if patches.skipped else ""),
        )
    )
    data = {
        "vllm_version": version,
        "apply": [{"id": p.spec.id, "why": p.why} for p in patches.to_apply],
        "skip": [{"id": s.spec.id, "cause": s.cause.value, "why": s.why} for s in patches.skipped],
    }
    return items, data
