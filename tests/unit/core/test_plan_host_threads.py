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


@pytest.mark.parametrize(
    ("parallel", "cpus", "threads"),
    [
        ({"tp": 2}, 2, "1"),
        ({"tp": 2}, 6, "3"),
        ({"tp": 2, "pp": 2}, 8, "2"),
        ({"dp": 3}, 7, "2"),  # the remainder stays idle rather than oversubscribed
        ({"tp": 4}, 2, "1"),
    ],
)
def test_the_cores_are_split_between_the_local_workers(
    parallel: dict[str, int], cpus: int, threads: str
) -> None:
    plan = plan_config(host(host_cpus=cpus, parallel=parallel))
    (change,) = plan.changes_to(fields.OMP_NUM_THREADS)
    assert change.new == threads
    workers = parallel.get("tp", 1) * parallel.get("pp", 1) * parallel.get("dp", 1)
    assert f"{cpus} usable cores / {workers} local workers" in change.reason
    oversubscribed = [w for w in plan.warnings if "take turns on the cores" in w]
    assert bool(oversubscribed) == (cpus < workers)
