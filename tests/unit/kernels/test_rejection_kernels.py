"""The rejection-sampler Triton kernels under the interpreter, against the host reference
(TorchRejectionOps, the RejectionOps port's torch ops): equal outputs, element for element."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch
from kernels.triton import load_interpreted

from adapters.torch.rejection import TorchRejectionOps
from ports.rejection import Drafts

PLACEHOLDER = -1
REFERENCE = TorchRejectionOps()


@pytest.fixture(scope="module")
def kernel() -> ModuleType:
    return load_interpreted("kernels.triton.rejection")


def make_drafts(
    counts: list[int], vocab: int, gen: torch.Generator, pad_at: tuple[int, ...] = ()
) -> Drafts:
    """Drafts of `counts` tokens per request; positions in `pad_at` (flat) are -1."""
    n = sum(counts)
    ids = torch.randint(0, vocab, (n,), generator=gen, dtype=torch.int32)
    for i in pad_at:
        ids[i] = -1
    cu = torch.tensor(counts, dtype=torch.int64).cumsum(0).to(torch.int32)
    return Drafts(ids, cu, max(counts) if counts else 0)


def empty_out(batch: int, max_len: int) -> torch.Tensor:
    return torch.full((batch, max_len + 1), PLACEHOLDER, dtype=torch.int32)


# Requests: none drafted, one, several, the most; tiles of BLOCK_K with room to spare.
COUNTS = [[3, 0, 1, 4], [1], [5, 5, 2], [0, 0], [7, 2, 0, 3, 1]]


@pytest.mark.parametrize("counts", COUNTS)
@pytest.mark.parametrize("with_mask", [False, True])
def test_greedy_matches_the_reference(
    kernel: ModuleType, counts: list[int], with_mask: bool
) -> None:
    gen = torch.Generator().manual_seed(sum(counts) * 7 + len(counts))
    vocab = 6  # small, so drafts often equal the target's argmax
    drafts = make_drafts(counts, vocab, gen, pad_at=(0,) if sum(counts) > 1 else ())
    n = drafts.token_ids.shape[0]
    # Most drafts accepted: the target agrees except where a coin says otherwise.
    target = drafts.token_ids.to(torch.int64).clamp(min=0).clone()
    flip = torch.rand(n, generator=gen) < 0.3
    target[flip] = (target[flip] + 1) % vocab
    bonus = torch.randint(100, 200, (len(counts),), generator=gen, dtype=torch.int64)
    mask = torch.rand(len(counts), generator=gen) < 0.6 if with_mask else None
    want, got = empty_out(len(counts), drafts.max_len), empty_out(len(counts), drafts.max_len)
    REFERENCE.verify_greedy(want, drafts, target, bonus, mask)
    kernel.verify_greedy(
        got, drafts.token_ids, drafts.cu_num_drafts, drafts.max_len, target, bonus, mask
    )
    assert torch.equal(got, want), (got, want)


def test_greedy_all_accepted_takes_the_bonus_and_all_rejected_the_target(
    kernel: ModuleType,
) -> None:
    drafts = Drafts(
        torch.tensor([4, 5, 6, 7, 8], dtype=torch.int64),
        torch.tensor([3, 5], dtype=torch.int32),
        3,
    )
    target = torch.tensor([4, 5, 6, 1, 8])
    bonus = torch.tensor([[90], [91]])  # vLLM's [B, 1]
    out = empty_out(2, 3)
    kernel.verify_greedy(out, drafts.token_ids, drafts.cu_num_drafts, 3, target, bonus, None)
    assert out.tolist() == [[4, 5, 6, 90], [1, -1, -1, -1]]


def random_case(
    counts: list[int], vocab: int, seed: int, with_draft_probs: bool
) -> tuple[Drafts, torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    drafts = make_drafts(counts, vocab, gen, pad_at=(1,) if sum(counts) > 2 else ())
    n = drafts.token_ids.shape[0]
    target = torch.rand(n, vocab, generator=gen).softmax(-1)
    draft = torch.rand(n, vocab, generator=gen).softmax(-1) if with_draft_probs else None
    if draft is not None and n > 0:  # a zero draft probability rejects
        draft[0, drafts.token_ids[0].clamp(min=0)] = 0.0
    # Draws away from each ratio, so float32 and float64 comparisons agree.
    ids = drafts.token_ids.to(torch.int64).clamp(min=0).unsqueeze(1)
    ratio = target.gather(1, ids).squeeze(1)
    if draft is not None:
        ratio = ratio / draft.gather(1, ids).squeeze(1).clamp(min=1e-30)
    accept = torch.rand(n, generator=gen) < 0.7
    uniform = torch.where(accept, ratio * 0.5, ratio * 1.5 + 1e-3).clamp(max=1.0)
    uniform = uniform.to(torch.float64)
    inv_q = torch.empty(len(counts), vocab).exponential_(generator=gen).reciprocal()
    return drafts, draft, target, uniform, inv_q


@pytest.mark.parametrize("counts", COUNTS)
@pytest.mark.parametrize("with_draft_probs", [False, True])
def test_recover_matches_the_reference(
    kernel: ModuleType, counts: list[int], with_draft_probs: bool
) -> None:
    vocab = 50  # not a multiple of the 16-wide tile below
    drafts, draft, target, _, inv_q = random_case(counts, vocab, len(counts), with_draft_probs)
    want = REFERENCE.recover(drafts, draft, target, inv_q)
    got = torch.full_like(drafts.token_ids, -7)
    kernel.recover(
        got, drafts.token_ids, drafts.cu_num_drafts, drafts.max_len, draft, target, inv_q, 16
    )
    assert torch.equal(got, want), (got, want)


def test_recover_ties_take_the_first_index_across_tiles(kernel: ModuleType) -> None:
    vocab = 40
    target = torch.zeros(2, vocab)
    target[:, [5, 21, 37]] = 0.25  # equal scores in three tiles of 16
    target[1, 3] = 0.25  # the draft's own token: removed when there are no draft probs
    drafts = Drafts(
        torch.tensor([3, 3], dtype=torch.int32), torch.tensor([2], dtype=torch.int32), 2
    )
    inv_q = torch.ones(1, vocab)
    got = torch.empty(2, dtype=torch.int32)
    kernel.recover(got, drafts.token_ids, drafts.cu_num_drafts, 2, None, target, inv_q, 16)
    assert got.tolist() == REFERENCE.recover(drafts, None, target, inv_q).tolist() == [5, 5]


@pytest.mark.parametrize("counts", COUNTS)
@pytest.mark.parametrize("with_draft_probs", [False, True])
def test_random_matches_the_reference(
    kernel: ModuleType, counts: list[int], with_draft_probs: bool
) -> None:
    vocab = 20
    seed = 100 + sum(counts)
    drafts, draft, target, uniform, inv_q = random_case(counts, vocab, seed, with_draft_probs)
    recovered = REFERENCE.recover(drafts, draft, target, inv_q)
    bonus = torch.arange(300, 300 + len(counts), dtype=torch.int64)
    is_greedy = torch.zeros(len(counts), dtype=torch.bool)
    is_greedy[::3] = True  # those rows stay as they are
    want, got = empty_out(len(counts), drafts.max_len), empty_out(len(counts), drafts.max_len)
    REFERENCE.verify_random(want, drafts, draft, target, bonus, recovered, uniform, is_greedy)
    kernel.verify_random(
        got,
        drafts.token_ids,
        drafts.cu_num_drafts,
        drafts.max_len,
        draft,
        target,
        bonus,
        recovered,
        uniform.to(torch.float32),
        is_greedy,
    )
    assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize(
    ("dtype", "replace"),
    [(torch.float32, (0.0, 1.0)), (torch.int64, (0, 0)), (torch.int32, (3, 9))],
)
def test_expand_matches_the_reference(
    kernel: ModuleType, dtype: torch.dtype, replace: tuple[float, float]
) -> None:
    counts = [2, 0, 5, 1, 0, 9]  # a run longer than the 4-wide tile below
    cu = torch.tensor(counts).cumsum(0).to(torch.int32)
    values = torch.tensor([0, 3, 0, 7, 2, 3]).to(dtype)
    want = REFERENCE.expand_to_tokens(values, cu, sum(counts), *replace)
    got = torch.full((sum(counts),), -5).to(dtype)
    kernel.expand_to_tokens(got, values, cu, *replace, block=4)
    assert torch.equal(got, want), (got, want)
