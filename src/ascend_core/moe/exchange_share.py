"""Which of a step's tokens one expert-parallel rank brings to the exchange, and the step
size the method and MC2's global_bs are taken from.

vLLM's EP group is DP x TP ranks (PCP 1). The ranks of one TP group hold the same tokens,
so they split them: each brings ceil(T / TP) (the last rows padded) and the TP all-reduce
after the layer joins their rows. DP ranks hold different tokens (DP attention: vLLM's
runner passes each rank its own, our device communicator gathers nothing), so each
brings its share of its own T. The method is the one the core chose for the most tokens
any DP rank carries (the plan's steps are counted so), and MC2's global_bs is the most
any rank brings times the EP size: every rank computes the same two numbers from vLLM's
num_tokens_across_dp, so all call the same collective with the same sizes.
"""

from __future__ import annotations

from attrs import field, frozen, validators

_positive = validators.ge(1)


@frozen
class ExchangeShare:
    """start, count: this rank's rows of the (padded) step; padded: the step's rows after
    padding to count x tp; step_tokens: the most tokens of any DP rank (the method's step
    size); max_tokens: the most tokens any EP rank brings (MC2's global_bs / EP size)."""

    start: int
    count: int = field(validator=_positive)
    padded: int = field(validator=_positive)
    step_tokens: int
    max_tokens: int = field(validator=_positive)


def exchange_share(
    tokens: int, tp_size: int, tp_rank: int, dp_tokens: tuple[int, ...] = ()
) -> ExchangeShare:
    """This rank's share of a step of `tokens` rows on its DP rank.

    dp_tokens: every DP rank's tokens this step (vLLM's num_tokens_across_dp), empty
    with DP 1; this DP rank's entry is `tokens` (counted in the step size either way).
    """
    if not 0 <= tp_rank < tp_size:
        raise ValueError(f"TP rank {tp_rank} is outside a TP group of {tp_size}")
    most = max((tokens, *dp_tokens))
    count = max(1, -(-tokens // tp_size))
    return ExchangeShare(
        start=tp_rank * count,
        count=count,
        padded=count * tp_size,
        step_tokens=most,
        max_tokens=max(1, -(-most // tp_size)),
    )
