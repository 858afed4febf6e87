"""The host's DraftInputOps against per-request loops written from vLLM 0.33's EAGLE input
kernels (v1/spec_decode/utils.py), one program per request as the kernels run."""

from __future__ import annotations

import random

import pytest
import torch

from adapters.torch.draft_inputs import TorchDraftInputOps

OPS = TorchDraftInputOps()
PAD = -1


def test_next_token_ids_take_the_last_valid_or_the_backup() -> None:
    vocab = 10
    sampled = torch.tensor(
        [[3, 4, -1, -1], [-1, -1, -1, -1], [5, 6, 7, 8], [2, 11, -1, -1], [1, -1, -1, -1]],
        dtype=torch.int32,
    )
    discard = torch.tensor([False, False, False, False, True])
    backup = torch.tensor([90, 91, 92, 93, 94], dtype=torch.int32)
    out_next = torch.full((5,), -7, dtype=torch.int32)
    out_count = torch.full((5,), -7, dtype=torch.int32)
    OPS.next_token_ids(sampled, discard, backup, out_next, out_count, vocab)
    # Row 3: 11 is outside the vocabulary, so 2 is the last valid token.
    assert out_next.tolist() == [4, 91, 8, 2, 94]
    assert out_count.tolist() == [2, 0, 4, 1, 0]


def test_sample_indices_step_back_over_the_rejected_drafts() -> None:
    cu = torch.tensor([3, 3, 5], dtype=torch.int32)  # drafts 3, 0, 2
    valid = torch.tensor([2, 1, 3], dtype=torch.int32)  # 1 accepted, -, 2 accepted
    qsl = torch.tensor([0, 4, 5, 8], dtype=torch.int32)
    indices = torch.empty(3, dtype=torch.int32)
    rejected = torch.empty(3, dtype=torch.int32)
    OPS.sample_indices(cu, valid, qsl, indices, rejected)
    assert rejected.tolist() == [2, 0, 0]
    assert indices.tolist() == [1, 4, 7]


def test_advance_one_moves_each_request_one_slot_and_pads_the_rest() -> None:
    block, max_len = 4, 12
    positions = torch.tensor([2, 3, 11, 7], dtype=torch.int64)
    table = torch.tensor([[5, 6, 7], [1, 2, 3], [8, 9, 4], [0, 10, 11]], dtype=torch.int32)
    seq_lens = torch.tensor([3, 4, 12, 8], dtype=torch.int32)
    out_pos = torch.full((4,), -9, dtype=torch.int64)
    out_slots = torch.full((6,), -9, dtype=torch.int64)  # 2 graph-padding entries
    OPS.advance_one(positions, table, seq_lens, out_pos, out_slots, block, max_len, PAD)
    assert out_pos.tolist() == [3, 4, 0, 8]
    # [block 5 offset 3, block 2 offset 0, past max_model_len, block 11 offset 0], padding
    assert out_slots.tolist() == [23, 8, PAD, 44, PAD, PAD]
    assert seq_lens.tolist() == [4, 5, 1, 9]


def _expand_reference(  # type: ignore[no-untyped-def]
    ids, positions, next_ids, qsl, qel, slots, shift, parallel_id, pad_id, out_len
):
    """copy_and_expand_eagle_inputs_kernel, request by request and token by token."""
    total_in = len(ids)
    out_ids, out_pos = [None] * out_len, [None] * out_len
    rejected, masked = [None] * out_len, [None] * out_len
    new_idx = [None] * (len(qel) * slots)
    mapping = [None] * total_in
    for r in range(len(qel)):
        qs, nqs, qe = qsl[r], qsl[r + 1], qel[r]
        if shift:
            n_valid, offset, start = qe - qs, 1, qs + r * (slots - 1)
        else:
            n_valid, offset, start = qe - qs + 1, 0, qs + r * slots
        n_out = n_valid + slots + (nqs - qe - 1)
        for j in range(n_out):
            o = start + j
            tok = ids[min(qs + offset + j, total_in - 1)] if j < n_valid else 0
            if j == n_valid:
                tok = next_ids[r]
            if n_valid < j < n_valid + slots:
                tok = parallel_id
            is_rej = j >= n_valid + slots
            if is_rej:
                tok = pad_id
            out_ids[o], rejected[o], masked[o] = tok, is_rej, n_valid < j < n_valid + slots
            out_pos[o] = 0 if is_rej else positions[qs] + j
            if n_valid <= j < n_valid + slots:
                new_idx[r * slots + j - n_valid] = o
        if shift:
            for j in range(nqs - qs):
                mapping[qs + j] = start + j
    return out_ids, out_pos, rejected, masked, new_idx, mapping


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("slots", "shift"), [(1, True), (3, True), (1, False), (3, False)])
def test_expand_inputs_match_the_kernel_loop(seed: int, slots: int, shift: bool) -> None:
    rng = random.Random(seed)
    batch = rng.randrange(1, 6)
    lens = [rng.randrange(1, 9) for _ in range(batch)]
    qsl = [0]
    for n in lens:
        qsl.append(qsl[-1] + n)
    # The last accepted token of each request; the tokens after it were rejected.
    qel = [qsl[r + 1] - 1 - rng.randrange(0, lens[r]) for r in range(batch)]
    total_in = qsl[-1]
    ids = [rng.randrange(0, 100) for _ in range(total_in)]
    positions = [rng.randrange(0, 50) for _ in range(total_in)]
    next_ids = [rng.randrange(100, 200) for _ in range(batch)]
    out_len = total_in + batch * (slots - int(shift))
    want = _expand_reference(ids, positions, next_ids, qsl, qel, slots, shift, 777, 0, out_len)

    size = out_len + 5  # the proposer's buffers are longer than one step
    out_ids = torch.full((size,), -5, dtype=torch.int32)
    out_pos = torch.full((size,), -5, dtype=torch.int64)
    out_rej = torch.zeros(size, dtype=torch.bool)
    out_mask = torch.zeros(size, dtype=torch.bool)
    new_idx = torch.full((batch * slots,), -5, dtype=torch.int32)
    mapping = torch.full((total_in,), -5, dtype=torch.int32)
    OPS.expand_inputs(
        torch.tensor(ids, dtype=torch.int32), torch.tensor(positions), torch.tensor(next_ids),
        torch.tensor(qsl, dtype=torch.int32), torch.tensor(qel, dtype=torch.int32),
        out_ids, out_pos, out_rej, out_mask, new_idx, mapping, 0, 777, total_in, slots, shift,
    )
    assert out_ids[:out_len].tolist() == want[0]
    assert out_pos[:out_len].tolist() == want[1]
    assert out_rej[:out_len].tolist() == want[2]
    assert out_mask[:out_len].tolist() == want[3]
    assert new_idx.tolist() == want[4]
    if shift:
        assert mapping.tolist() == want[5]
    else:
        assert mapping.tolist() == [-5] * total_in  # not written without the shift
