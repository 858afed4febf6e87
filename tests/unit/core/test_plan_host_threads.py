"""Plan step: OMP_NUM_THREADS on the host device."""

from __future__ import annotations

import pytest

from ascend_core.plan import fields, plan_config
from unit.core.plan_fixtures import host, npu


def test_the_host_computes_on_every_usable_core_with_a_reason() -> None:
    plan = plan_config(host(host_cpus=6))
    (change,) = plan.changes_to(fields.OMP_NUM_THREADS)
    assert (change.old, change.new) == (None, "6")
    assert "1 torch thread" in change.reason
    assert "set OMP_NUM_THREADS yourself" in change.reason
    assert "env.OMP_NUM_THREADS: unset -> 6" in plan.describe()


@pytest.mark.parametrize("value", ["1", "3", ""])
def test_a_users_omp_num_threads_stands(value: str) -> None:
    plan = plan_config(host(host_cpus=6, omp_num_threads=value))
    assert plan.ok
    assert not plan.changes_to(fields.OMP_NUM_THREADS)


def test_unknown_core_count_leaves_it_unset_with_a_warning() -> None:
    plan = plan_config(host(host_cpus=None))
    assert plan.ok
    assert not plan.changes_to(fields.OMP_NUM_THREADS)
    assert any("OMP_NUM_THREADS" in w and "1 torch thread" in w for w in plan.warnings)


def test_the_npu_keeps_vllms_thread_choice() -> None:
    plan = plan_config(npu(host_cpus=6))
    assert not plan.changes_to(fields.OMP_NUM_THREADS)
    assert not any("OMP_NUM_THREADS" in w for w in plan.warnings)


def test_a_core_count_below_one_is_rejected() -> None:
    with pytest.raises(ValueError):
        host(host_cpus=0)
