"""Property: any Deployment yields a ConfigPlan (maybe with errors), never another exception."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings

from ascend_core.deployment import Deployment, GraphMode
from ascend_core.errors import AscendError
from ascend_core.plan import ConfigPlan, plan_config
from ascend_core.plan import fields as plan_fields
from unit.core.plan_fixtures import deployments

# Each field a change may name -> the deployment's value it changes.
OLD_VALUE: dict[str, Callable[[Deployment], Any]] = {
    plan_fields.CUSTOM_ALL_REDUCE: lambda d: d.parallel.disable_custom_all_reduce,
    plan_fields.SEQUENCE_PARALLEL: lambda d: "1" if d.parallel.sequence_parallel else "0",
    plan_fields.SEQUENCE_PARALLEL_KEY: lambda d: d.additional_config.get("enable_flashcomm1"),
    plan_fields.COMPILE_MODE: lambda d: d.compilation.mode,
    plan_fields.GRAPH_MODE: lambda d: d.compilation.graph_mode,
    plan_fields.CAPTURE_SIZES: lambda d: d.compilation.capture_sizes,
    plan_fields.CUSTOM_OPS: lambda d: d.compilation.custom_ops,
    plan_fields.BLOCK_SIZE: lambda d: d.cache.block_size,
    plan_fields.KV_CACHE_DTYPE: lambda d: d.cache.kv_cache_dtype,
    plan_fields.QUANTIZATION: lambda d: d.user_quantization,
    plan_fields.NPU_ALLOC_CONF: lambda d: d.npu_alloc_conf,
    plan_fields.OMP_NUM_THREADS: lambda d: d.omp_num_threads,
    # The deployment does not carry vLLM's fusion-pass switches: the plan turns them off
    # on an NPU whatever they were (plan/graph.py _no_cuda_fusion_passes).
    plan_fields.FUSE_NORM_QUANT: lambda d: None,
    plan_fields.FUSE_ACT_QUANT: lambda d: None,
    plan_fields.PREFIX_CACHING: lambda d: d.cache.enable_prefix_caching,
    # Not deployment inputs: what vLLM's hybrid-model hook set before the plan runs.
    plan_fields.MAMBA_CACHE_MODE: lambda d: "align",
    plan_fields.MAMBA_BLOCK_SIZE: lambda d: None,
    plan_fields.V2_MODEL_RUNNER: lambda d: d.v2_model_runner,
}


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
    # A change's old value is what the deployment held.
    for change in plan.changes:
        assert change.field in OLD_VALUE, f"no deployment input known for {change.field}"
        assert change.old == OLD_VALUE[change.field](deployment), change
    if deployment.compilation.enforce_eager or deployment.launch_blocking:
        assert plan.graph_mode is GraphMode.NONE
    if plan.graph_mode is not GraphMode.NONE and plan.decisions.sequence_parallel:
        sizes = plan.decisions.capture_sizes or ()
        assert all(s % deployment.parallel.tp == 0 for s in sizes)
