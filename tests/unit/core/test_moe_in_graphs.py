"""What the steps captured in NPU graphs exchange: MC2 inside the graphs (nothing read
back), the methods that read their splits on the host replaced by partial sums there."""

from __future__ import annotations

from ascend_core.moe import MoeCommMethod
from ascend_core.moe.comm_method import CommChoice, MoeCommPlan
from ascend_core.moe.in_graphs import captures, in_graphs

MC2, ALLTOALL, ALLGATHER = MoeCommMethod.MC2, MoeCommMethod.ALLTOALL, MoeCommMethod.ALLGATHER


def plan(small: MoeCommMethod, large: MoeCommMethod, capacity: int = 16) -> MoeCommPlan:
    return MoeCommPlan(capacity, CommChoice(small, "s"), CommChoice(large, "l"))


def test_only_mc2_is_captured():
    assert captures(MC2)
    assert not captures(ALLTOALL) and not captures(ALLGATHER)


def test_captured_steps_within_the_mc2_capacity_exchange_inside_the_graphs():
    said = in_graphs(plan(MC2, ALLTOALL), captured_tokens=16)
    assert said.startswith("captured steps (up to 16 tokens) exchange by mc2 inside the graphs")
    assert "read nothing back" in said


def test_captured_steps_of_a_host_reading_method_run_partial_sums():
    said = in_graphs(plan(ALLTOALL, ALLTOALL), captured_tokens=8)
    assert "vLLM's all-reduce adds the partial sums inside the graphs" in said
    assert "alltoall reads its splits on the host" in said
    assert said.endswith("eager steps exchange by alltoall")
