"""Plan step: GPU-only settings (custom all-reduce, custom ops, KV cache dtypes)."""

from __future__ import annotations

import pytest

from ascend_core.errors import ConfigError
from ascend_core.plan import fields, plan_config
from unit.core.plan_fixtures import host, npu


def test_custom_all_reduce_is_turned_off_under_tp_with_a_reason() -> None:
    plan = plan_config(npu(parallel={"tp": 2}))
    (change,) = plan.changes_to(fields.CUSTOM_ALL_REDUCE)
    assert (change.old, change.new) == (False, True)
    assert "HCCL" in change.reason


def test_custom_all_reduce_is_left_alone_without_tp_or_when_already_off() -> None:
    assert not plan_config(npu()).changes_to(fields.CUSTOM_ALL_REDUCE)
    already = npu(parallel={"tp": 2, "disable_custom_all_reduce": True})
    assert not plan_config(already).changes_to(fields.CUSTOM_ALL_REDUCE)


def test_custom_ops_gain_all_and_keep_the_users_per_op_entries() -> None:
    plan = plan_config(npu(compilation={"custom_ops": ["-silu_and_mul"]}))
    (change,) = plan.changes_to(fields.CUSTOM_OPS)
    assert change.old == ("-silu_and_mul",)
    assert change.new == ("all", "-silu_and_mul")
    assert "Inductor" in change.reason
    assert plan.decisions.custom_ops == ("all", "-silu_and_mul")


def test_custom_ops_already_all_are_unchanged() -> None:
    plan = plan_config(npu(compilation={"custom_ops": ["all"]}))
    assert not plan.changes_to(fields.CUSTOM_OPS)


@pytest.mark.parametrize("ops", [["none"], ["none", "-rms_norm"]])
def test_custom_ops_none_as_vllm_writes_it_by_default_becomes_all(ops: list[str]) -> None:
    plan = plan_config(npu(compilation={"custom_ops": ops}))
    (change,) = plan.changes_to(fields.CUSTOM_OPS)
    assert change.new == ("all", *ops[1:])
    assert "'-name'" in change.reason


@pytest.mark.parametrize("dtype", ["auto", "bfloat16", "float16"])
def test_supported_kv_cache_dtypes_pass(dtype: str) -> None:
    assert plan_config(npu(cache={"kv_cache_dtype": dtype})).ok


@pytest.mark.parametrize("dtype", ["fp8", "fp8_e5m2", "fp8_e4m3", "nvfp4"])
def test_gpu_only_kv_cache_dtypes_are_refused_with_a_hint(dtype: str) -> None:
    for deployment in (npu(cache={"kv_cache_dtype": dtype}), host(cache={"kv_cache_dtype": dtype})):
        (error,) = plan_config(deployment).errors
        assert isinstance(error, ConfigError)
        assert f"cache_config.cache_dtype={dtype!r}" in error.what
        assert "--kv-cache-dtype" in error.hint
