"""`ascend-doctor plan`'s entry points; the sections live in `adapters.doctor.plan`."""

from adapters.doctor.plan.assemble import plan_report
from adapters.doctor.plan.config import build_deployment
from adapters.doctor.plan.model import Target, choose_target
from adapters.doctor.plan.roofline import RooflineAsk

__all__ = ["RooflineAsk", "Target", "build_deployment", "choose_target", "plan_report"]
