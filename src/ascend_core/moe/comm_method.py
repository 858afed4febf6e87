"""How a MoE layer's tokens reach the ranks that hold their experts, and back.

Three methods, as the reference plugin has them (vllm_ascend/ascend_forward_context.py,
select_moe_comm_method and its per-chip helpers; facts only):

- ALLGATHER: every rank sees every token of its group and runs the experts it holds; the
  partial outputs are summed (no expert parallelism, small EP, 310P, the host's gloo path).
- MC2: torch_npu's npu_moe_distribute_dispatch_v2 / npu_moe_distribute_combine_v2, the
  communication fused with the expert compute, with a fixed per-rank token capacity, so it
  is captured in a graph.
- ALLTOALL: npu_moe_init_routing_v2, an all-to-all of the routed tokens, the grouped
  matmul and the unpermute; any step size.

The method is chosen per step from the tokens it carries (the most of any DP rank): steps
up to the MC2 capacity and larger steps may differ, so the plan holds both.
"""

from __future__ import annotations

import enum

from attrs import field, frozen, validators

from ports.device import ChipFamily

_positive = validators.ge(1)

# Tokens one rank may hand to MC2 dispatch in one step: the reference's
# _MC2_TOKENS_PER_RANK_LIMIT, and CANN's bound on Bs for aclnnMoeDistributeDispatchV2 on
# A3 (0 < Bs <= 512); on A2 the op allows 256, which the reference does not check.
MC2_TOKENS_PER_RANK = 512
A2_MC2_TOKENS_PER_RANK = 256
# CANN's hidden sizes for MC2 (aclnnMoeDistributeDispatchV2): A3 [1024, 8192]; A2 (the
# fullmesh algorithm) a multiple of 32 up to 7168.
A3_MC2_HIDDEN = (1024, 8192)
A2_MC2_MAX_HIDDEN = 7168
# CANN's bound on top-k for MC2.
MC2_MAX_TOP_K = 16
# The reference's A2 rules (_select_a2_moe_comm_method): MC2 only for a wide EP group
# whose ranks hold few experts; all-gather above 512 routed experts.
A2_MC2_MIN_EP = 16
A2_MC2_MAX_EXPERTS_PER_RANK = 24
A2_MAX_EXPERTS = 512


class MoeCommMethod(enum.Enum):
    """How a MoE layer moves tokens between the ranks of its expert-parallel group. The
    values are what VLLM_ASCEND_MOE_COMM_METHOD takes."""

    ALLGATHER = "allgather"
    MC2 = "mc2"
    ALLTOALL = "alltoall"


# The chips whose HCCL has the MC2 dispatch/combine kernels (CANN's op docs list A2 and
# A3; the reference also sends A5 to MC2).
MC2_CHIPS = frozenset({ChipFamily.A2, ChipFamily.A3, ChipFamily.A5})


@frozen
class MoeCommFacts:
    """What the method depends on, as plain data.

    ep_size: ranks of the expert-parallel group (vLLM's: DP x PCP x TP when
    enable_expert_parallel is on); 1 without expert parallelism.
    decode_tokens: the tokens of the largest step the MC2 capacity is sized for: the
    largest captured size when graphs are captured, else max_num_seqs x (1 + k).
    """

    chip_family: ChipFamily
    hidden_size: int = field(validator=_positive)
    num_experts: int = field(validator=_positive)  # routed experts (logical)
    experts_per_token: int = field(validator=_positive)  # top-k
    ep_size: int = field(validator=_positive)
    tp: int = field(validator=_positive)
    decode_tokens: int = field(validator=_positive)
    max_num_batched_tokens: int = field(validator=_positive)
    prefill_mc2: bool = False  # additional_config.enable_prefill_mc2
    lora: bool = False  # --enable-lora


@frozen
class CommChoice:
    """One method and why."""

    method: MoeCommMethod
    reason: str


@frozen
class MoeCommPlan:
    """The method for steps up to `capacity` tokens and for larger ones.

    capacity: the most tokens (across the TP group, the most of any DP rank) a step may
    carry and still be served by MC2 (mc2_capacity).
    forced: whether VLLM_ASCEND_MOE_COMM_METHOD chose it.
    """

    capacity: int
    small: CommChoice
    large: CommChoice
    forced: bool = False

    def for_tokens(self, tokens: int) -> CommChoice:
        """The method of a step that carries `tokens` (the most of any DP rank)."""
        return self.small if tokens <= self.capacity else self.large

    def methods(self) -> tuple[MoeCommMethod, ...]:
        """The distinct methods the plan may use, small steps' first."""
        if self.small.method is self.large.method:
            return (self.small.method,)
        return (self.small.method, self.large.method)

    def describe(self) -> str:
        if self.small.method is self.large.method:
            return f"{self.small.method.value} ({self.small.reason})"
        return (
            f"{self.small.method.value} for steps of up to {self.capacity} tokens "
            f"({self.small.reason}); {self.large.method.value} above "
            f"({self.large.reason})"
        )


def mc2_tokens_per_rank(chip: ChipFamily) -> int:
    """The most tokens one rank may dispatch through MC2 in a step on `chip`."""
    return A2_MC2_TOKENS_PER_RANK if chip is ChipFamily.A2 else MC2_TOKENS_PER_RANK


def mc2_capacity(facts: MoeCommFacts) -> int:
    """Tokens a step may carry for MC2: the decode bound (or max_num_batched_tokens with
    enable_prefill_mc2), spread over the TP ranks, at most mc2_tokens_per_rank a rank
    (the reference's set_mc2_tokens_capacity)."""
    base = facts.max_num_batched_tokens if facts.prefill_mc2 else facts.decode_tokens
    per_rank = min(-(-base // facts.tp), mc2_tokens_per_rank(facts.chip_family))
    return per_rank * facts.tp


def mc2_shape_refusal(facts: MoeCommFacts) -> str | None:
    """Why CANN's MC2 kernels refuse this model's shape on this chip; None when they take
    it (the hidden size, top-k and, on A2, the experts a rank holds)."""
    h, k, chip = facts.hidden_size, facts.experts_per_token, facts.chip_family
    if chip not in MC2_CHIPS:
        return f"{chip.value} has no MC2 dispatch/combine kernels (CANN lists A2 and A3)"
    if k > MC2_MAX_TOP_K:
        return f"top-k {k} is above the {MC2_MAX_TOP_K} MC2 takes"
    if chip is ChipFamily.A3 and not A3_MC2_HIDDEN[0] <= h <= A3_MC2_HIDDEN[1]:
        low, high = A3_MC2_HIDDEN
        return f"hidden size {h} is outside the [{low}, {high}] MC2 takes on A3"
    if chip is ChipFamily.A2 and (h > A2_MC2_MAX_HIDDEN or h % 32):
        return f"hidden size {h} is not a multiple of 32 up to {A2_MC2_MAX_HIDDEN} (MC2 on A2)"
    if chip is ChipFamily.A2:
        per_rank = facts.num_experts // facts.ep_size
        if per_rank > A2_MC2_MAX_EXPERTS_PER_RANK:
            return (
                f"{per_rank} experts a rank exceed the {A2_MC2_MAX_EXPERTS_PER_RANK} MC2 "
                "takes on A2"
            )
    return None


def choose_method(facts: MoeCommFacts, tokens: int) -> CommChoice:
    """The reference's rule for a step of `tokens` (the most of any DP rank)."""
    ep, chip = facts.ep_size, facts.chip_family
    capacity = mc2_capacity(facts)
    fits = tokens <= capacity
    if ep == 1:
        return CommChoice(
            MoeCommMethod.ALLGATHER,
            "no expert parallelism: every rank holds a slice of every expert",
        )
    if chip is ChipFamily.HOST:
        return CommChoice(
            MoeCommMethod.ALLGATHER,
            "the host serves expert parallelism over gloo: each rank runs its experts on "
            "every token and the partial outputs are summed",
        )
    if facts.lora:
        return CommChoice(
            MoeCommMethod.ALLTOALL,
            "LoRA with expert parallelism: the MoE LoRA layers wrap the all-to-all path only",
        )
    if chip is ChipFamily.P310:
        return CommChoice(MoeCommMethod.ALLGATHER, "310P has no MC2 or all-to-all MoE path")
    if chip is ChipFamily.A2:
        return _a2(facts, fits, capacity)
    if chip is ChipFamily.A3:
        refusal = mc2_shape_refusal(facts)
        if refusal is not None:
            return CommChoice(MoeCommMethod.ALLTOALL, f"A3 with EP {ep}: {refusal}")
        if fits:
            return CommChoice(
                MoeCommMethod.MC2,
                f"A3 with EP {ep}: the step fits MC2's {capacity} tokens "
                f"({capacity // facts.tp} a rank)",
            )
        return CommChoice(
            MoeCommMethod.ALLTOALL,
            f"A3 with EP {ep}: the step is above MC2's {capacity} tokens",
        )
    return _a5(facts, fits, capacity)


def _a2(facts: MoeCommFacts, fits: bool, capacity: int) -> CommChoice:
    ep = facts.ep_size
    per_rank = facts.num_experts // ep
    if facts.num_experts > A2_MAX_EXPERTS:
        return CommChoice(
            MoeCommMethod.ALLGATHER,
            f"A2 with {facts.num_experts} routed experts (more than {A2_MAX_EXPERTS})",
        )
    refusal = mc2_shape_refusal(facts)
    if refusal is not None and per_rank <= A2_MC2_MAX_EXPERTS_PER_RANK:
        return CommChoice(MoeCommMethod.ALLGATHER, f"A2: {refusal}")
    if per_rank <= A2_MC2_MAX_EXPERTS_PER_RANK and ep >= A2_MC2_MIN_EP and fits:
        return CommChoice(
            MoeCommMethod.MC2,
            f"A2 with EP {ep} (at least {A2_MC2_MIN_EP}), {per_rank} experts a rank (at "
            f"most {A2_MC2_MAX_EXPERTS_PER_RANK}), the step within MC2's {capacity} tokens",
        )
    if not fits and ep >= A2_MC2_MIN_EP and per_rank <= A2_MC2_MAX_EXPERTS_PER_RANK:
        why = f"the step is above MC2's {capacity} tokens"
    elif ep < A2_MC2_MIN_EP:
        why = f"EP {ep} is below the {A2_MC2_MIN_EP} ranks MC2 needs on A2"
    else:
        why = f"{per_rank} experts a rank exceed the {A2_MC2_MAX_EXPERTS_PER_RANK} of MC2 on A2"
    return CommChoice(MoeCommMethod.ALLGATHER, f"A2: {why}")


def _a5(facts: MoeCommFacts, fits: bool, capacity: int) -> CommChoice:
    ep, k = facts.ep_size, facts.experts_per_token
    refusal = mc2_shape_refusal(facts)
    if fits and refusal is None:
        return CommChoice(
            MoeCommMethod.MC2, f"A5 with EP {ep}: the step fits MC2's {capacity} tokens"
        )
    why = refusal or f"the step is above MC2's {capacity} tokens"
    if ep <= k:
        return CommChoice(
            MoeCommMethod.ALLGATHER,
            f"A5: {why} and EP {ep} is at most top-k {k} (each token reaches nearly every "
            "rank anyway)",
        )
    return CommChoice(MoeCommMethod.ALLTOALL, f"A5: {why}, and EP {ep} is above top-k {k}")


def plan_moe_comm(facts: MoeCommFacts) -> MoeCommPlan:
    """The reference's choice for steps within the MC2 capacity and for larger ones."""
    capacity = mc2_capacity(facts)
    small = choose_method(facts, capacity)
    # A step never carries more than max_num_batched_tokens on one DP rank.
    large = (
        small if facts.max_num_batched_tokens <= capacity else choose_method(facts, capacity + 1)
    )
    return MoeCommPlan(capacity=capacity, small=small, large=large)
