"""Ray placement decisions: what an engine needs, whether a cluster holds it, which device
a Ray-placed NPU worker uses."""

from __future__ import annotations

import pytest

from ascend_core.errors import ConfigError
from ascend_core.ray_placement import place, ray_needs, ray_worker_device_index
from ports.cluster import RayClusterFacts, RayNode
from ports.device import DeviceKind


def cluster(*nodes: tuple[str, dict[str, float], bool]) -> RayClusterFacts:
    return RayClusterFacts(
        "10.0.0.1:6379", tuple(RayNode(f"n{i}", a, alive, r) for i, (a, r, alive) in
                               enumerate(nodes))
    )


def test_needs_one_unit_of_the_device_resource_per_worker() -> None:
    npu = ray_needs(DeviceKind.NPU, tp=8, pp=2)
    assert (npu.resource, npu.workers) == ("NPU", 16)
    assert any("ASCEND_RT_VISIBLE_DEVICES" in line for line in npu.lines())
    assert any("HCCL" in line for line in npu.lines())
    host = ray_needs(DeviceKind.CPU, tp=2, pp=1)
    assert (host.resource, host.workers) == ("CPU", 2)


def test_two_nodes_of_eight_npus_hold_tp8_pp2() -> None:
    facts = cluster(("a", {"NPU": 8.0, "CPU": 96}, True), ("b", {"NPU": 8.0}, True))
    placement = place(ray_needs(DeviceKind.NPU, 8, 2), facts)
    assert placement.error is None and placement.warning is None
    assert placement.per_node == (("a", 8), ("b", 8))
    assert "16 NPU bundle(s) on 2 alive node(s)" in placement.describe()


def test_a_cluster_short_of_npus_is_refused_with_the_count_and_the_fix() -> None:
    # A dead node's devices and a fraction of a device place nothing.
    facts = cluster(("a", {"NPU": 8.0}, True), ("b", {"NPU": 8.0}, False), ("c", {"NPU": 0.5},
                                                                              True))
    placement = place(ray_needs(DeviceKind.NPU, 8, 2), facts)
    assert isinstance(placement.error, ConfigError)
    assert "has 8 NPU on 2 alive node(s)" in placement.error.what
    assert "needs 16" in placement.error.what
    assert "add 8 NPU(s)" in placement.error.hint


def test_a_tp_group_larger_than_any_node_is_placed_with_a_warning() -> None:
    facts = cluster(("a", {"CPU": 1.0}, True), ("b", {"CPU": 1.0}, True))
    placement = place(ray_needs(DeviceKind.CPU, 2, 1), facts)
    assert placement.error is None
    assert placement.warning is not None and "spans nodes" in placement.warning


@pytest.mark.parametrize(
    ("reserved", "visible", "local_rank", "index"),
    [
        (("1",), "1", 1, 0),  # Ray set the variable to the worker's own NPU
        (("3",), "0,1,2,3", 0, 3),  # NOSET: the node's list, the reserved one found in it
        (("2",), None, 0, 2),  # NOSET, variable unset: the id itself
        ((), "0,1", 1, 1),  # nothing reserved: the local rank
    ],
)
def test_a_ray_worker_uses_the_npu_ray_reserved(reserved, visible, local_rank, index) -> None:
    assert ray_worker_device_index(reserved, visible, local_rank) == index


def test_a_reserved_npu_hidden_by_the_variable_is_an_error_with_the_fix() -> None:
    with pytest.raises(ConfigError) as info:
        ray_worker_device_index(("5",), "0,1", 0)
    assert "reserved NPU 5" in info.value.what
    assert "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES" in info.value.hint
