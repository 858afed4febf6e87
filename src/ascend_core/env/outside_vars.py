"""Variables outside VLLM_ASCEND_* that CANN reads and the plan checks against its own
decisions; registered like ours (type, default, one-line doc) but never set by the plan."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from attrs import evolve

from ascend_core.env.variables import EnvVar, int_var

# 1 launches each NPU kernel synchronously (CANN's debugging switch).
LAUNCH_BLOCKING = evolve(
    int_var(
        "ASCEND_LAUNCH_BLOCKING",
        0,
        "CANN: 1 launches each NPU kernel synchronously (for debugging a kernel), which "
        "graph capture cannot record, so the plan runs the model without NPU graphs.",
        choices=(0, 1),
    ),
    owner="CANN",
)

# CANN's environment variable reference, HCCL_BUFFSIZE: MB of buffer each communication
# domain takes on each rank; 200 when unset; MC2's op docs give its floor.
HCCL_BUFFSIZE = evolve(
    int_var(
        "HCCL_BUFFSIZE",
        200,
        "MB of HCCL buffer per communication domain on each rank (CANN); MC2 needs a floor "
        "the plan computes.",
        minimum=1,
    ),
    owner="CANN",
)

OUTSIDE_VARS: tuple[EnvVar[Any], ...] = (LAUNCH_BLOCKING, HCCL_BUFFSIZE)

T = TypeVar("T")


def given(outside_env: Mapping[str, str], var: EnvVar[T]) -> T | None:
    """`var`'s value as set in `outside_env` (Deployment.outside_env: name -> raw text),
    None when unset; ValueError when the text is not what CANN takes."""
    raw = outside_env.get(var.name)
    return None if raw is None else var.parse(raw)
