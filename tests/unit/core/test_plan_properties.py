"""Property: any Deployment yields a ConfigPlan (maybe with errors), never another exception."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from ascend_core.deployment import Deployment, GraphMode
from ascend_core.errors import AscendError
from ascend_core.plan import ConfigPlan, plan_config
from ascend_core.plan import fields as plan_fields
from unit.core.plan_fixtures import deployments


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deployments)
def test_any_deployment_gives_a_plan(deployment: Deployment) -> None:
    plan = plan_config(deployment)
    assert isinstance(plan, ConfigPlan)
    assert all(isinstance(e, AscendError) and e.what and e.hint for e in plan.errors)
    assert {c.field for c in plan.changes} <= plan_fields.ALL
    assert all(c.reason for c in plan.changes)
    assert isinstance(plan.describe(), str)
    # No field is changed twice, so applying changes in order is unambiguous.
    changed = [c.field for c in plan.changes]
    assert len(changed) == len(set(changed))
    # A change's old value is what the deployment held (or what an earlier step set).
    if deployment.compilation.enforce_eager or deployment.launch_blocking:
        assert plan.graph_mode is GraphMode.NONE
    if plan.graph_mode is not GraphMode.NONE and plan.decisions.sequence_parallel:
        sizes = plan.decisions.capture_sizes or ()
        assert all(s % deployment.parallel.tp == 0 for s in sizes)
