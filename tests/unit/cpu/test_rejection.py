"""The torch rejection sampler (adapters/torch/rejection.py) against a naive oracle.

Greedy: exact, against a per-request loop written from vLLM 0.33's Triton kernels.
Random: the first output token's distribution equals the target's over many draws on a
vocabulary of 5, with and without draft probabilities. The bound: each token's frequency
within 5 standard errors of its target probability, sqrt(p(1-p)/n), so a correct
sampler fails a check with probability under 6e-7 per token; the draws are seeded, so
the test itself is deterministic.
"""

from __future__ import annotations

import pytest
import torch

from adapters.torch.rejection import TorchRejectionOps
from ports.rejection import Drafts

PLACEHOLDER = -1
OPS = TorchRejectionOps()


def _drafts(per_request: list[list[int]]) -> tuple[Drafts, int]:
    flat = [t for r in per_request for t in r]
    cu = torch.tensor([len(r) for r in per_request], dtype=torch.int32).cumsum(0).to(torch.int32)
    k = max((len(r) for r in per_request), default=0)
    return Drafts(torch.tensor(flat, dtype=torch.int32), cu, k), k


def _out(batch: int, k: int) -> torch.Tensor:
    return torch.full((batch, k + 1), PLACEHOLDER, dtype=torch.int32)


def _oracle_greedy(per_request, argmax, bonus, is_greedy, k):  # type: ignore[no-untyped-def]
    out = [[PLACEHOLDER] * (k + 1) for _ in per_request]
    start = 0
    for b, drafts in enumerate(per_request):
        if is_greedy is not None and not is_greedy[b]:
            start += len(drafts)
            continue
        rejected = False
        for pos, d in enumerate(drafts):
            t = int(argmax[start + pos])
            out[b][pos] = t
            if d != t:
                rejected = True
                break
        if not rejected:
            out[b][len(drafts)] = int(bonus[b])
        start += len(drafts)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_greedy_equals_the_oracle(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    batch = int(torch.randint(1, 7, (1,), generator=gen))
    vocab = 4  # small, so drafts often match
    per_request = [
        torch.randint(0, vocab, (int(torch.randint(0, 5, (1,), generator=gen)),),
                      generator=gen).tolist()
        for _ in range(batch)
    ]
    drafts, k = _drafts(per_request)
    n = drafts.token_ids.shape[0]
    argmax = torch.randint(0, vocab, (n,), generator=gen)
    bonus = torch.randint(0, vocab, (batch, 1), generator=gen)
    is_greedy = None if seed % 2 else torch.rand(batch, generator=gen) < 0.7
    out = _out(batch, k)
    OPS.verify_greedy(out, drafts, argmax, bonus, is_greedy)
    assert out.tolist() == _oracle_greedy(per_request, argmax, bonus.flatten(), is_greedy, k)


def test_greedy_all_accepted_takes_the_bonus_and_padded_drafts_are_rejected() -> None:
    drafts, k = _drafts([[1, 2, 3], [4, -1], []])
    argmax = torch.tensor([1, 2, 3, 4, 0])
    out = _out(3, k)
    OPS.verify_greedy(out, drafts, argmax, torch.tensor([[9], [8], [7]]), None)
    assert out.tolist() == [[1, 2, 3, 9], [4, 0, -1, -1], [7, -1, -1, -1]]


def test_expand_repeats_each_value_over_its_drafts_and_replaces() -> None:
    got = OPS.expand_to_tokens(
        torch.tensor([0.0, 0.5, 2.0]), torch.tensor([2, 2, 5], dtype=torch.int32), 5, 0, 1
    )
    assert got.tolist() == [1.0, 1.0, 2.0, 2.0, 2.0]


def _first_token_frequencies(
    target: torch.Tensor, draft: torch.Tensor | None, draws: int, seed: int
) -> torch.Tensor:
    """One draft per request, `draws` requests, all random: the output's first token."""
    gen = torch.Generator().manual_seed(seed)
    vocab = target.shape[0]
    if draft is None:
        token_ids = torch.full((draws,), 1, dtype=torch.int32)  # an n-gram's fixed guess
        draft_probs = None
    else:
        token_ids = torch.multinomial(draft, draws, replacement=True, generator=gen).to(
            torch.int32
        )
        draft_probs = draft.expand(draws, vocab).contiguous()
    cu = torch.arange(1, draws + 1, dtype=torch.int32)
    drafts = Drafts(token_ids, cu, 1)
    target_probs = target.expand(draws, vocab).contiguous()
    uniform = torch.rand(draws, dtype=torch.float64, generator=gen)
    inv_q = torch.empty(draws, vocab).exponential_(generator=gen).reciprocal()
    recovered = OPS.recover(drafts, draft_probs, target_probs, inv_q)
    out = _out(draws, 1)
    bonus = torch.zeros(draws, 1, dtype=torch.int64)
    is_greedy = torch.zeros(draws, dtype=torch.bool)
    OPS.verify_random(out, drafts, draft_probs, target_probs, bonus, recovered, uniform, is_greedy)
    first = out[:, 0].to(torch.int64)
    assert bool((first >= 0).all())
    return torch.bincount(first, minlength=vocab).double() / draws


@pytest.mark.parametrize("with_draft_probs", [True, False], ids=["draft-probs", "no-draft-probs"])
def test_random_output_distribution_equals_the_target(with_draft_probs: bool) -> None:
    draws = 40_000
    target = torch.tensor([0.05, 0.4, 0.25, 0.2, 0.1])
    draft = torch.tensor([0.3, 0.1, 0.1, 0.2, 0.3]) if with_draft_probs else None
    freq = _first_token_frequencies(target, draft, draws, seed=1)
    p = target.double()
    bound = 5 * torch.sqrt(p * (1 - p) / draws)
    assert bool(((freq - p).abs() <= bound).all()), (freq.tolist(), p.tolist())


def test_random_verification_with_the_same_draws_repeats() -> None:
    target = torch.tensor([0.1, 0.2, 0.3, 0.4])
    draft = torch.tensor([0.25, 0.25, 0.25, 0.25])
    a = _first_token_frequencies(target, draft, 500, seed=3)
    b = _first_token_frequencies(target, draft, 500, seed=3)
    assert torch.equal(a, b)


def test_random_rows_leave_greedy_rows_alone_and_zero_draft_probability_rejects() -> None:
    drafts, k = _drafts([[2, 1], [3]])
    vocab = 4
    target = torch.full((3, vocab), 0.25)
    draft_probs = torch.full((3, vocab), 0.25)
    draft_probs[0, 2] = 0.0  # request 0's first draft: probability 0, always rejected
    out = _out(2, k)
    OPS.verify_random(
        out, drafts, draft_probs, target, torch.tensor([[5], [6]]),
        torch.tensor([0, 0, 3], dtype=torch.int32), torch.zeros(3, dtype=torch.float64),
        torch.tensor([False, True]),
    )
    assert out.tolist() == [[0, -1, -1], [-1, -1, -1]]
