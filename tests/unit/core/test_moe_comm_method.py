"""The MoE communication method: one test per rule of the choice (the reference's
select_moe_comm_method and its per-chip helpers, plus CANN's MC2 limits), the capacity,
and the methods an operator forces."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from ascend_core.errors import ConfigError
from ascend_core.moe import (
    MoeCommFacts,
    MoeCommMethod,
    choose_method,
    mc2_capacity,
    plan_moe_comm,
)
from ascend_core.moe.forced import force_method
from ports.device import ChipFamily

ALLGATHER, MC2, ALLTOALL = MoeCommMethod.ALLGATHER, MoeCommMethod.MC2, MoeCommMethod.ALLTOALL


def facts(chip: ChipFamily = ChipFamily.A3, **overrides: Any) -> MoeCommFacts:
    """DeepSeek-V3's MoE shape (256 experts, top-8, hidden 7168) on 16 EP ranks, TP 1,
    decode steps of up to 64 tokens, 4096 tokens a step at most."""
    base = MoeCommFacts(
        chip_family=chip,
        hidden_size=7168,
        num_experts=256,
        experts_per_token=8,
        ep_size=16,
        tp=1,
        decode_tokens=64,
        max_num_batched_tokens=4096,
    )
    return attrs.evolve(base, **overrides)


# --- capacity -------------------------------------------------------------------------


def test_capacity_is_the_decode_bound_spread_over_tp():
    assert mc2_capacity(facts(decode_tokens=64, tp=1)) == 64
    assert mc2_capacity(facts(decode_tokens=65, tp=2)) == 66  # ceil(65 / 2) x 2


def test_capacity_is_at_most_512_tokens_a_rank():
    assert mc2_capacity(facts(decode_tokens=4096, tp=2)) == 1024


def test_capacity_on_a2_is_at_most_256_tokens_a_rank():
    assert mc2_capacity(facts(ChipFamily.A2, decode_tokens=4096, tp=1)) == 256


def test_prefill_mc2_sizes_the_capacity_from_max_num_batched_tokens():
    assert mc2_capacity(facts(decode_tokens=64, max_num_batched_tokens=300)) == 64
    assert (
        mc2_capacity(facts(decode_tokens=64, max_num_batched_tokens=300, prefill_mc2=True)) == 300
    )


# --- the rules ------------------------------------------------------------------------


def test_without_expert_parallelism_every_chip_all_gathers():
    for chip in ChipFamily:
        assert choose_method(facts(chip, ep_size=1), 1).method is ALLGATHER


def test_the_host_all_gathers_over_gloo():
    choice = choose_method(facts(ChipFamily.HOST), 1)
    assert choice.method is ALLGATHER and "gloo" in choice.reason


def test_lora_with_expert_parallelism_takes_all_to_all():
    for chip in (ChipFamily.A2, ChipFamily.A3, ChipFamily.A5):
        assert choose_method(facts(chip, lora=True), 1).method is ALLTOALL


def test_310p_all_gathers():
    assert choose_method(facts(ChipFamily.P310), 1).method is ALLGATHER


def test_a2_takes_mc2_for_a_wide_group_of_few_experts_a_rank_within_capacity():
    choice = choose_method(facts(ChipFamily.A2), 64)
    assert choice.method is MC2 and "EP 16" in choice.reason


def test_a2_all_gathers_below_16_ep_ranks():
    choice = choose_method(facts(ChipFamily.A2, ep_size=8), 1)
    assert choice.method is ALLGATHER and "below the 16" in choice.reason


def test_a2_all_gathers_with_more_than_24_experts_a_rank():
    choice = choose_method(facts(ChipFamily.A2, num_experts=512, ep_size=16), 1)
    assert choice.method is ALLGATHER and "32 experts a rank" in choice.reason


def test_a2_all_gathers_above_512_experts():
    choice = choose_method(facts(ChipFamily.A2, num_experts=1024, ep_size=64), 1)
    assert choice.method is ALLGATHER and "1024 routed experts" in choice.reason


def test_a2_all_gathers_a_step_above_the_capacity():
    choice = choose_method(facts(ChipFamily.A2), 65)
    assert choice.method is ALLGATHER and "above MC2's 64" in choice.reason


def test_a2_all_gathers_a_hidden_size_mc2_refuses():
    choice = choose_method(facts(ChipFamily.A2, hidden_size=8192), 1)
    assert choice.method is ALLGATHER and "hidden size 8192" in choice.reason


def test_a3_takes_mc2_within_the_capacity_and_all_to_all_above():
    assert choose_method(facts(), 64).method is MC2
    assert choose_method(facts(), 65).method is ALLTOALL


def test_a3_takes_mc2_at_any_ep_size_above_one():
    assert choose_method(facts(ep_size=2, num_experts=8), 1).method is MC2


def test_a3_takes_all_to_all_for_a_hidden_size_mc2_refuses():
    choice = choose_method(facts(hidden_size=512), 1)
    assert choice.method is ALLTOALL and "[1024, 8192]" in choice.reason


def test_a3_takes_all_to_all_for_a_top_k_mc2_refuses():
    assert choose_method(facts(experts_per_token=17), 1).method is ALLTOALL


def test_a5_takes_mc2_within_the_capacity():
    assert choose_method(facts(ChipFamily.A5), 64).method is MC2


def test_a5_all_gathers_above_the_capacity_when_ep_is_at_most_top_k():
    choice = choose_method(facts(ChipFamily.A5, ep_size=8, experts_per_token=8), 65)
    assert choice.method is ALLGATHER and "top-k 8" in choice.reason


def test_a5_takes_all_to_all_above_the_capacity_when_ep_exceeds_top_k():
    assert choose_method(facts(ChipFamily.A5, ep_size=16), 65).method is ALLTOALL


def test_a5_leaves_mc2_within_the_capacity_for_a_shape_mc2_refuses():
    choice = choose_method(facts(ChipFamily.A5, ep_size=32, experts_per_token=17), 64)
    assert choice.method is ALLTOALL and "top-k 17" in choice.reason


def test_the_plan_holds_the_method_of_small_and_large_steps():
    plan = plan_moe_comm(facts())
    assert (plan.capacity, plan.small.method, plan.large.method) == (64, MC2, ALLTOALL)
    assert plan.for_tokens(64) is plan.small and plan.for_tokens(65) is plan.large
    assert plan.methods() == (MC2, ALLTOALL)
    assert "mc2 for steps of up to 64 tokens" in plan.describe()


def test_no_large_steps_when_every_step_fits_the_capacity():
    plan = plan_moe_comm(facts(decode_tokens=64, max_num_batched_tokens=64))
    assert plan.methods() == (MC2,)


# --- forced ---------------------------------------------------------------------------


def test_forced_all_gather_is_always_served():
    for chip in ChipFamily:
        plan = force_method(facts(chip, ep_size=1), ALLGATHER)
        assert plan.forced and plan.methods() == (ALLGATHER,)


def test_forced_all_to_all_is_served_for_every_step_on_a3():
    plan = force_method(facts(), ALLTOALL)
    assert plan.for_tokens(1).method is ALLTOALL and plan.for_tokens(4096).method is ALLTOALL


def test_forced_mc2_is_served_when_every_step_fits():
    plan = force_method(facts(max_num_batched_tokens=512), MC2)
    assert plan.methods() == (MC2,) and "forced" in plan.small.reason


@pytest.mark.parametrize(
    ("method", "changes", "said"),
    [
        (MC2, {"ep_size": 1}, "no expert parallelism"),
        (ALLTOALL, {"ep_size": 1}, "no expert parallelism"),
        (MC2, {"chip_family": ChipFamily.HOST}, "gloo"),
        (ALLTOALL, {"chip_family": ChipFamily.P310}, "all-gather MoE path only"),
        (MC2, {"chip_family": ChipFamily.P310}, "all-gather MoE path only"),
        (MC2, {"lora": True, "max_num_batched_tokens": 512}, "LoRA"),
        (MC2, {"chip_family": ChipFamily.A2, "ep_size": 8, "num_experts": 64}, "EP of at least 16"),
        (MC2, {"max_num_batched_tokens": 4096}, "at most 512 a rank"),
        (MC2, {"hidden_size": 512, "max_num_batched_tokens": 512}, "hidden size 512"),
    ],
)
def test_forced_method_refused_with_the_reason(method, changes, said):
    with pytest.raises(ConfigError) as caught:
        force_method(facts(**changes), method)
    assert said in str(caught.value) and "VLLM_ASCEND_MOE_COMM_METHOD" in str(caught.value)
    assert caught.value.hint
