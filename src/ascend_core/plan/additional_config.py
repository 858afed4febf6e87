"""Step: parse and check vLLM's additional_config (the Ascend keys) against the layout."""

from __future__ import annotations

from ascend_core.ascend_config import ParallelSizes, parse_ascend_config
from ascend_core.deployment import Deployment
from ascend_core.errors import AscendError, PlanErrors
from ascend_core.plan.result import Draft
from ports.device import DeviceKind


def validate_additional_config(deployment: Deployment, draft: Draft) -> Draft:
    """Every problem of additional_config (keys, values, fine-grained TP vs DP) as errors."""
    sizes = ParallelSizes(
        data_parallel_size=deployment.parallel.dp,
        tensor_parallel_size=deployment.parallel.tp,
    )
    try:
        config = parse_ascend_config(deployment.additional_config, sizes)
    except PlanErrors as problems:
        for error in problems.errors:
            draft = draft.fail(error)
        return draft
    except AscendError as error:
        return draft.fail(error)
    draft = draft.decide(ascend_config=config)
    if deployment.device_kind is DeviceKind.CPU and config.enable_kv_nz:
        draft = draft.warn(
            "additional_config.enable_kv_nz is ignored on the host device: the NZ layout "
            "is the NPU cube unit's fractal format."
        )
    return draft
