"""The config plan: what vLLM's settings must become on Ascend, and why."""

from __future__ import annotations

from ascend_core.plan.pipeline import STEPS, Step, plan_config
from ascend_core.plan.result import Change, ConfigPlan, Decisions, ModelRunner, WorkerKind

__all__ = [
    "STEPS",
    "Change",
    "ConfigPlan",
    "Decisions",
    "ModelRunner",
    "Step",
    "WorkerKind",
    "plan_config",
]
