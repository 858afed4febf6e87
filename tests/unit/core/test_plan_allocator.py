"""Plan step: PYTORCH_NPU_ALLOC_CONF for the worker processes."""

from __future__ import annotations

import pytest

from ascend_core.plan import fields, plan_config
from unit.core.plan_fixtures import host, npu


def test_unset_gains_expandable_segments_with_a_reason() -> None:
    plan = plan_config(npu())
    (change,) = plan.changes_to(fields.NPU_ALLOC_CONF)
    assert (change.old, change.new) == (None, "expandable_segments:True")
    assert "fragment" in change.reason
    assert plan.decisions.npu_alloc_conf == "expandable_segments:True"


def test_other_user_options_are_kept_and_extended() -> None:
    plan = plan_config(npu(npu_alloc_conf="page_size:1g"))
    (change,) = plan.changes_to(fields.NPU_ALLOC_CONF)
    assert change.new == "page_size:1g,expandable_segments:True"


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("max_split_size_mb:64", "max_split_size_mb"),
        ("garbage_collection_threshold:0.6", "garbage_collection_threshold"),
        (
            "garbage_collection_threshold:0.6,max_split_size_mb:128",
            "max_split_size_mb and garbage_collection_threshold",
        ),
    ],
)
def test_fixed_segment_options_are_never_combined_with_expandable_segments(
    value: str, named: str
) -> None:
    """torch_npu rejects expandable_segments:True next to max_split_size_mb or
    garbage_collection_threshold, so the plan leaves such a value alone and says why
    (vllm_ascend/platform.py check_and_update_config skips them the same way, silently)."""
    plan = plan_config(npu(npu_alloc_conf=value))
    assert plan.ok
    assert not plan.changes_to(fields.NPU_ALLOC_CONF)
    assert plan.decisions.npu_alloc_conf == value
    (warning,) = [w for w in plan.warnings if "PYTORCH_NPU_ALLOC_CONF" in w]
    assert named in warning and "expandable_segments:True" in warning


@pytest.mark.parametrize("value", ["expandable_segments:False", "a:1, expandable_segments:True"])
def test_a_users_expandable_segments_choice_stands(value: str) -> None:
    plan = plan_config(npu(npu_alloc_conf=value))
    assert plan.ok
    assert not plan.changes_to(fields.NPU_ALLOC_CONF)
    assert plan.decisions.npu_alloc_conf == value


def test_sleep_mode_gets_no_expandable_segments() -> None:
    """Sleep mode allocates the weights and KV cache from a torch_npu MemPool over a
    pluggable allocator (adapters/npu/vmm_pool.py), which expandable segments bypass."""
    plan = plan_config(npu(cache={"enable_sleep_mode": True}))
    assert plan.ok, plan.errors
    assert not plan.changes_to(fields.NPU_ALLOC_CONF)
    assert not plan.decisions.npu_alloc_conf


def test_sleep_mode_with_the_users_expandable_segments_stands_with_a_warning() -> None:
    plan = plan_config(
        npu(cache={"enable_sleep_mode": True}, npu_alloc_conf="expandable_segments:True")
    )
    assert plan.ok, plan.errors
    assert plan.decisions.npu_alloc_conf == "expandable_segments:True"
    (warning,) = [w for w in plan.warnings if "PYTORCH_NPU_ALLOC_CONF" in w]
    assert "sleep mode" in warning and "remove it" in warning


def test_a_malformed_value_is_left_alone_with_a_warning() -> None:
    plan = plan_config(npu(npu_alloc_conf="garbage"))
    assert not plan.changes_to(fields.NPU_ALLOC_CONF)
    assert any("PYTORCH_NPU_ALLOC_CONF='garbage'" in w for w in plan.warnings)


def test_the_host_does_not_touch_the_npu_allocator() -> None:
    assert not plan_config(host()).changes_to(fields.NPU_ALLOC_CONF)
