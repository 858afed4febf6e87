"""DP attention with expert parallelism on the NPU: graphs kept in that shape (and why),
refused elsewhere (and why); captured DP steps must exchange by MC2; each EP rank's share
of a step (ascend_core/moe/exchange_share.py)."""

from __future__ import annotations

from typing import Any

import pytest

from ascend_core.deployment import BatchSettings, GraphMode
from ascend_core.errors import ConfigError
from ascend_core.moe.comm_method import MoeCommMethod
from ascend_core.moe.exchange_share import exchange_share
from ascend_core.plan import fields, plan_config
from ascend_core.plan.graph import NPU_PARALLEL_GRAPHS_REASON
from ports.device import ChipFamily
from unit.core.plan_fixtures import dense_model, npu

# The emulated tests' Qwen3-MoE style: hidden 1024 (A3's MC2 takes 1024..8192), 8 experts.
MOE = dense_model(is_moe=True, num_experts=8, experts_per_token=2)
BATCH = BatchSettings(max_num_seqs=8, max_num_batched_tokens=64)


def dp_ep(chip: ChipFamily = ChipFamily.A3, env: dict[str, str] | None = None,
          **parallel: Any) -> Any:
    par = {"dp": 2, "tp": 1, "expert_parallel": True, **parallel}
    return npu(MOE, chip=chip, parallel=par, batch=BATCH,
               compilation={"capture_sizes": (4, 8)}, ascend_env=env or {})


def test_dp_with_expert_parallel_at_tp1_keeps_the_default_graphs_and_says_why() -> None:
    plan = plan_config(dp_ep())
    assert plan.ok, plan.describe()
    assert plan.graph_mode is GraphMode.FULL_AND_PIECEWISE
    assert all("data parallel" not in c.reason for c in plan.changes_to(fields.GRAPH_MODE))
    why = plan.decisions.dp_graphs
    assert why.startswith("data parallel 2 with expert parallelism and TP 1 a DP rank keeps")
    assert "pads every rank to the same captured size" in why
    moe = plan.decisions.moe
    assert moe is not None and moe.comm.for_tokens(8).method is MoeCommMethod.MC2
    assert moe.placement.ep_size == 2


@pytest.mark.parametrize(
    ("model", "parallel", "unproven"),
    [
        (dense_model(), {"dp": 2}, "a dense model"),
        (MOE, {"dp": 2}, "no expert parallelism"),
        (MOE, {"dp": 2, "tp": 2, "expert_parallel": True}, "TP 2 a DP rank"),
    ],
)
def test_other_dp_shapes_run_without_graphs_with_the_reason(
    model: Any, parallel: dict[str, Any], unproven: str
) -> None:
    plan = plan_config(npu(model, chip=ChipFamily.A3, parallel=parallel, batch=BATCH))
    assert plan.graph_mode is GraphMode.NONE
    (change,) = plan.changes_to(fields.GRAPH_MODE)
    assert f"({unproven}) is not" in change.reason
    assert plan.decisions.dp_graphs in change.reason


def test_pipeline_parallel_still_runs_without_graphs() -> None:
    plan = plan_config(dp_ep(pp=2, dp=1))
    assert plan.graph_mode is GraphMode.NONE
    (change,) = plan.changes_to(fields.GRAPH_MODE)
    assert change.reason.endswith(NPU_PARALLEL_GRAPHS_REASON)
    assert plan.decisions.dp_graphs == ""


def test_no_dp_decision_without_dp_or_when_eager() -> None:
    assert plan_config(dp_ep(dp=1)).decisions.dp_graphs == ""
    eager = npu(MOE, chip=ChipFamily.A3, parallel={"dp": 2, "expert_parallel": True},
                batch=BATCH, compilation={"enforce_eager": True})
    assert plan_config(eager).decisions.dp_graphs == ""


def test_captured_dp_steps_without_mc2_are_refused_before_weights_load() -> None:
    """Forced all-to-all reads its splits on the host: no capture; under DP the captured
    steps cannot fall back to partial sums (each rank's tokens are its own)."""
    plan = plan_config(dp_ep(env={"VLLM_ASCEND_MOE_COMM_METHOD": "alltoall"}))
    (error,) = [e for e in plan.errors if "data parallel 2" in str(e)]
    assert isinstance(error, ConfigError)
    assert "alltoall" in str(error) and "--enforce-eager" in str(error)


def test_a2_dp_ep_graphs_are_refused_for_its_all_gather_and_served_eagerly() -> None:
    """A2 takes MC2 only from EP 16: EP 2 all-gathers, which a capture cannot hold."""
    assert any("data parallel 2" in str(e) for e in plan_config(dp_ep(ChipFamily.A2)).errors)
    eager = npu(MOE, chip=ChipFamily.A2, parallel={"dp": 2, "expert_parallel": True},
                batch=BATCH, compilation={"enforce_eager": True})
    assert plan_config(eager).ok


def test_tp_ranks_split_their_step_and_dp_ranks_bring_their_own() -> None:
    # TP 2, DP 1 (the EP group is the TP group): 5 tokens, 3 a rank, one padding row.
    second = exchange_share(5, tp_size=2, tp_rank=1)
    assert (second.start, second.count, second.padded) == (3, 3, 6)
    assert (second.step_tokens, second.max_tokens) == (5, 3)
    # DP 2, TP 1: this rank's 3 tokens, the other's 7; MC2's per-rank bound is 7.
    mine = exchange_share(3, tp_size=1, tp_rank=0, dp_tokens=(7, 3))
    assert (mine.start, mine.count, mine.padded) == (0, 3, 3)
    assert (mine.step_tokens, mine.max_tokens) == (7, 7)
    # DP 2 x TP 2: the TP group splits its own step, bounded by the largest DP step.
    both = exchange_share(4, tp_size=2, tp_rank=1, dp_tokens=(4, 9))
    assert (both.start, both.count, both.step_tokens, both.max_tokens) == (2, 2, 9, 5)


def test_an_idle_dp_rank_brings_one_padding_row() -> None:
    share = exchange_share(0, tp_size=1, tp_rank=0, dp_tokens=(0, 4))
    assert (share.count, share.padded, share.max_tokens) == (1, 1, 4)


def test_a_share_outside_its_tp_group_is_an_error() -> None:
    with pytest.raises(ValueError, match="TP rank 2"):
        exchange_share(4, tp_size=2, tp_rank=2)
