"""A method the operator forces (VLLM_ASCEND_MOE_COMM_METHOD): served for every step, or
refused with the reason before any weight loads."""

from __future__ import annotations

import enum

from ascend_core.errors import ConfigError
from ascend_core.moe.comm_method import (
    A2_MC2_MIN_EP,
    CommChoice,
    MoeCommFacts,
    MoeCommMethod,
    MoeCommPlan,
    mc2_capacity,
    mc2_shape_refusal,
    mc2_tokens_per_rank,
)
from ports.device import ChipFamily

VARIABLE = "VLLM_ASCEND_MOE_COMM_METHOD"


class MoeCommRequest(enum.Enum):
    """What VLLM_ASCEND_MOE_COMM_METHOD asks for: the plan's choice, or one method."""

    AUTO = "auto"
    ALLGATHER = "allgather"
    MC2 = "mc2"
    ALLTOALL = "alltoall"

    @property
    def method(self) -> MoeCommMethod | None:
        return None if self is MoeCommRequest.AUTO else MoeCommMethod(self.value)


_UNSET = f"unset {VARIABLE} (or set it to auto) to let the plan choose"


def force_method(facts: MoeCommFacts, method: MoeCommMethod) -> MoeCommPlan:
    """`method` for every step, or a ConfigError saying why it cannot serve here."""
    why = _refusal(facts, method)
    if why is not None:
        what, hint = why
        raise ConfigError(f"{VARIABLE}={method.value} cannot serve: {what}.", hint)
    choice = CommChoice(method, f"forced by {VARIABLE}")
    return MoeCommPlan(capacity=mc2_capacity(facts), small=choice, large=choice, forced=True)


def _refusal(facts: MoeCommFacts, method: MoeCommMethod) -> tuple[str, str] | None:
    chip = facts.chip_family
    if method is MoeCommMethod.ALLGATHER:
        return None
    if facts.ep_size == 1:
        return (
            "it moves tokens between expert-parallel ranks and there is no expert "
            "parallelism (EP size 1)",
            f"add --enable-expert-parallel with TP x DP above 1, or {_UNSET}",
        )
    if chip is ChipFamily.HOST:
        return (
            "the host serves expert parallelism over gloo with all-gather only",
            f"set {VARIABLE}=allgather, or {_UNSET}",
        )
    if chip is ChipFamily.P310:
        return ("310P has the all-gather MoE path only", f"set {VARIABLE}=allgather")
    if method is MoeCommMethod.ALLTOALL:
        return None
    return _mc2_refusal(facts)


def _mc2_refusal(facts: MoeCommFacts) -> tuple[str, str] | None:
    chip = facts.chip_family
    shape = mc2_shape_refusal(facts)
    if shape is not None:
        return shape, f"set {VARIABLE}=alltoall, or {_UNSET}"
    if facts.lora:
        return (
            "the MoE LoRA layers wrap the all-to-all path only",
            f"set {VARIABLE}=alltoall, or serve without --enable-lora",
        )
    if chip is ChipFamily.A2 and facts.ep_size < A2_MC2_MIN_EP:
        return (
            f"MC2 on A2 spans 2, 4 or 8 servers (EP of at least {A2_MC2_MIN_EP}); EP is "
            f"{facts.ep_size}",
            f"set {VARIABLE}=alltoall, or {_UNSET}",
        )
    limit = mc2_tokens_per_rank(chip)
    per_rank = -(-facts.max_num_batched_tokens // facts.tp)
    if per_rank > limit:
        return (
            f"a step may carry {facts.max_num_batched_tokens} tokens ({per_rank} a TP rank) "
            f"and MC2 dispatches at most {limit} a rank on {chip.value}",
            f"lower --max-num-batched-tokens to {limit * facts.tp} or less, or {_UNSET} "
            "(MC2 for steps within its capacity, another method above)",
        )
    return None
