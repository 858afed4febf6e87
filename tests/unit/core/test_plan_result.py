"""The ConfigPlan itself: describe(), require_ok(), Change fields, the pipeline's shape."""

from __future__ import annotations

import pytest

from ascend_core.deployment import GraphMode
from ascend_core.errors import AscendError, ConfigError, PlanErrors
from ascend_core.plan import STEPS, Change, plan_config
from ascend_core.plan import fields as plan_fields
from ascend_core.plan.result import Decisions, Draft
from unit.core.plan_fixtures import npu


def test_describe_renders_one_line_per_change_as_field_old_new_reason() -> None:
    plan = plan_config(npu(parallel={"pp": 2}))  # pipeline parallel: no NPU graphs yet
    text = plan.describe()
    lines = text.splitlines()
    assert lines[0].startswith("Ascend config plan: worker=NPU, block_size=128")
    assert "  change  cache_config.block_size: unset -> 128 (unset; " in text
    graph = "  change  compilation_config.cudagraph_mode: unset -> NONE (unset; FULL_AND_PIECEWISE"
    assert graph in text
    assert len([ln for ln in lines if ln.startswith("  change  ")]) == len(plan.changes)


def test_describe_lists_warnings_and_errors() -> None:
    plan = plan_config(
        npu(parallel={"tp": 6, "dcp": 4, "expert_parallel": True}, npu_alloc_conf="x")
    )
    text = plan.describe()
    assert "  warning enable_expert_parallel" in text
    assert "  error   decode_context_parallel_size=4" in text


def test_describe_of_an_empty_plan_says_so() -> None:
    assert "no changes" in Draft(Decisions()).finish().describe()


def test_require_ok_returns_the_plan_or_raises_every_error_together() -> None:
    good = plan_config(npu())
    assert good.require_ok() is good
    bad = plan_config(npu(parallel={"tp": 6, "dcp": 4}, cache={"kv_cache_dtype": "fp8"}))
    with pytest.raises(PlanErrors) as info:
        bad.require_ok()
    assert len(info.value.errors) == 2
    assert all(isinstance(e, ConfigError) for e in info.value.errors)
    assert "2 problem(s)" in str(info.value)


def test_every_error_has_a_hint() -> None:
    plan = plan_config(
        npu(
            parallel={"tp": 6, "dcp": 4},
            cache={"kv_cache_dtype": "fp8", "block_size": 24},
            user_quantization="awq",
        )
    )
    assert len(plan.errors) == 4
    assert all(isinstance(e, AscendError) and e.hint for e in plan.errors)


def test_change_refuses_a_field_the_adapter_does_not_know() -> None:
    with pytest.raises(ValueError, match="field"):
        Change("compilation_config.nonsense", 1, 2, "why")


def test_change_describe_renders_enums_tuples_and_unset() -> None:
    change = Change(plan_fields.CAPTURE_SIZES, None, (1, 2), "because")
    assert (
        change.describe() == "compilation_config.cudagraph_capture_sizes: unset -> [1, 2] (because)"
    )
    mode = Change(plan_fields.GRAPH_MODE, GraphMode.FULL, GraphMode.NONE, "r")
    assert mode.describe() == "compilation_config.cudagraph_mode: FULL -> NONE (r)"


def test_every_change_field_is_a_known_path_and_plans_are_deterministic() -> None:
    deployment = npu(parallel={"tp": 4, "sequence_parallel": True})
    first, second = plan_config(deployment), plan_config(deployment)
    assert first.changes == second.changes
    assert {c.field for c in first.changes} <= plan_fields.ALL


def test_the_pipeline_runs_the_steps_given() -> None:
    assert len(STEPS) >= 8
    plan = plan_config(npu(), steps=())
    assert plan.changes == () and plan.ok
