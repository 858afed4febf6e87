"""MoE expert parallelism: the communication method, the experts each rank holds and the
HCCL buffer the method needs. Pure decisions over plain data."""

from __future__ import annotations

from ascend_core.moe.comm_method import (
    MC2_TOKENS_PER_RANK,
    CommChoice,
    MoeCommFacts,
    MoeCommMethod,
    MoeCommPlan,
    choose_method,
    mc2_capacity,
    plan_moe_comm,
)
from ascend_core.moe.hccl_buffer import HCCL_BUFFSIZE_DEFAULT_MB, mc2_buffer_mb
from ascend_core.moe.placement import ExpertPlacement, place_experts

__all__ = [
    "HCCL_BUFFSIZE_DEFAULT_MB",
    "MC2_TOKENS_PER_RANK",
    "CommChoice",
    "ExpertPlacement",
    "MoeCommFacts",
    "MoeCommMethod",
    "MoeCommPlan",
    "choose_method",
    "mc2_buffer_mb",
    "mc2_capacity",
    "place_experts",
    "plan_moe_comm",
]
