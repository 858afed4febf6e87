"""vLLM's rejection sampler on the RejectionOps port (rejection_sample rebound, the expand
kernel overridden through vLLM's kernel-override registry): seeded requests repeat, and
greedy rows agree with the target's argmax."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from adapters.vllm.patches import apply_one
from ascend_core.patches import REGISTRY

IDS = ("spec-rejection-sample-torch", "spec-expand-kernel-torch")


@pytest.fixture(scope="module")
def rejection_sampler():  # type: ignore[no-untyped-def]
    from vllm.v1.sample import rejection_sampler

    for spec in REGISTRY:
        if spec.id in IDS:
            apply_one(spec)
    return rejection_sampler


def _call(module, seed: int):  # type: ignore[no-untyped-def]
    vocab, k = 6, 3
    num_drafts = [3, 0, 2, 3]
    gen = torch.Generator().manual_seed(100)
    n = sum(num_drafts)
    draft_ids = torch.randint(0, vocab, (n,), generator=gen, dtype=torch.int32)
    logits = torch.randn(n, vocab, generator=gen)
    bonus = torch.randint(0, vocab, (4, 1), generator=gen)
    cu = torch.tensor(num_drafts).cumsum(0).to(torch.int32)
    temperature = torch.tensor([0.0, 0.7, 1.0, 1.3])  # request 0 greedy
    meta = SimpleNamespace(
        all_greedy=False, all_random=False, temperature=temperature,
        generators={i: torch.Generator().manual_seed(seed + i) for i in (1, 2, 3)},
    )
    out = module.rejection_sample(draft_ids, num_drafts, k, cu, None, logits.clone(), bonus, meta)
    return out, draft_ids, logits


def test_the_module_functions_are_the_ports(rejection_sampler) -> None:  # type: ignore[no-untyped-def]
    assert rejection_sampler.rejection_sample.__ascend_patch__ == IDS[0]
    from vllm.triton_utils.dispatcher import KernelOverride

    assert isinstance(rejection_sampler._expand.kernel, KernelOverride)
    assert rejection_sampler.expand_kernel is rejection_sampler._expand.kernel
    # vLLM's own function, launching the overridden kernel (greedy temperature 0 -> 1).
    got = rejection_sampler.expand_batch_to_tokens(
        torch.tensor([0.0, 2.0]), torch.tensor([1, 3], dtype=torch.int32), 3, 0, 1
    )
    assert got.tolist() == [1.0, 2.0, 2.0]


def test_seeded_requests_repeat_and_greedy_rows_follow_the_argmax(rejection_sampler) -> None:  # type: ignore[no-untyped-def]
    a, draft_ids, logits = _call(rejection_sampler, seed=5)
    b, _, _ = _call(rejection_sampler, seed=5)
    assert torch.equal(a, b)
    argmax = logits.argmax(-1)
    row = a[0].tolist()  # request 0 (greedy): accepted drafts equal the argmax, then it
    for pos in range(3):
        assert row[pos] == int(argmax[pos])
        if int(draft_ids[pos]) != int(argmax[pos]):
            break
    assert a[1, 0].item() != -1  # no drafts: the bonus token
    assert ((a >= -1) & (a < 6)).all()
