"""The per-step AttentionPlan's array ops against a naive per-token oracle."""

from __future__ import annotations

import random

import pytest
import torch

from adapters.torch.attention_plan import build_attention_plan, token_row_decode
from ports.ops import AttentionPart, AttentionPlan, AttentionPlanNeeds, IndexDtype

HOST = AttentionPlanNeeds(block_table_dtype=IndexDtype.INT64, token_rows=True)


def _oracle_part(
    ids: list[int], qsl: list[int], seq_lens: list[int], table: list[list[int]], pad: int
) -> dict[str, list[int] | list[list[int]]]:
    """One part as plain lists, a token at a time."""
    q_lens = [qsl[i + 1] - qsl[i] for i in ids]
    width = max(q_lens)
    gather, rows, tokens, starts = [], [], [], [0]
    for b, (seq, q_len) in enumerate(zip(ids, q_lens, strict=True)):
        starts.append(starts[-1] + q_len)
        for s in range(width):
            if s < q_len:
                gather.append(qsl[seq] + s)
                rows.append(b * width + s)
                tokens.append(qsl[seq] + s)
            else:
                gather.append(pad)
    return {
        "seqs": ids,
        "query_lens": q_lens,
        "seq_lens": [seq_lens[i] for i in ids],
        "query_start_loc": starts,
        "block_table": [table[i] for i in ids],
        "gather": gather,
        "padded_rows": rows,
        "tokens": tokens,
    }


def _check_part(
    part: AttentionPart | None, ids: list[int], qsl: list[int], seq_lens: list[int],
    table: list[list[int]], pad: int, dtype: torch.dtype,
) -> None:
    if not ids:
        assert part is None
        return
    assert part is not None
    want = _oracle_part(ids, qsl, seq_lens, table, pad)
    assert part.actual_query_lens == tuple(want["query_lens"])  # type: ignore[arg-type]
    assert part.actual_seq_lens == tuple(want["seq_lens"])  # type: ignore[arg-type]
    assert part.max_query_len == max(want["query_lens"])  # type: ignore[type-var]
    assert part.block_table.dtype == dtype
    for name, values in want.items():
        tensor = getattr(part, name)
        assert tensor.tolist() == values, name
        if name != "block_table":
            assert tensor.dtype == torch.int64, name


def _check(q_lens: list[int], seq_lens: list[int], needs: AttentionPlanNeeds,
           pad_tokens: int = 0, num_decodes: int | None = None) -> AttentionPlan:
    qsl = [0]
    for n in q_lens:
        qsl.append(qsl[-1] + n)
    width = max([1, *(-(-s // 4) for s in seq_lens)])
    table = [[7 * i + j for j in range(width)] for i in range(len(seq_lens))]
    n_tok = qsl[-1]
    slots = torch.arange(n_tok + pad_tokens)
    plan = build_attention_plan(
        torch.tensor(qsl + [n_tok] * 3, dtype=torch.int32),  # entries past B: ignored
        torch.tensor(seq_lens, dtype=torch.int32),
        torch.tensor(table, dtype=torch.int32).reshape(len(seq_lens), width),
        n_tok,
        needs=needs,
        slot_mapping=slots,
        num_decodes=num_decodes,
    )
    dtype = getattr(torch, needs.block_table_dtype.value)
    assert plan.query_start_loc_host == tuple(qsl)
    assert plan.seq_lens_host == tuple(seq_lens)
    assert plan.query_start_loc.tolist() == qsl and plan.seq_lens.tolist() == seq_lens
    assert plan.block_table.dtype == dtype
    assert plan.max_query_len == max(q_lens, default=0)
    assert plan.max_seq_len == max(seq_lens, default=0)
    assert plan.num_actual_tokens == n_tok
    assert plan.slot_mapping is not None and plan.slot_mapping.tolist() == list(range(n_tok))
    if num_decodes is None:
        decode = [i for i, q in enumerate(q_lens) if q == 1]
        prefill = [i for i, q in enumerate(q_lens) if q > 1]
    else:
        decode = [i for i, q in enumerate(q_lens) if q and i < num_decodes]
        prefill = [i for i, q in enumerate(q_lens) if q and i >= num_decodes]
    _check_part(plan.decode, decode, qsl, seq_lens, table, n_tok, dtype)
    _check_part(plan.prefill, prefill, qsl, seq_lens, table, n_tok, dtype)
    assert [p.is_decode for p in plan.parts] == [True] * bool(decode) + [False] * bool(prefill)
    if not needs.token_rows:
        assert plan.token_block_table is None and plan.token_seq_lens is None
        return plan
    assert plan.token_block_table is not None and plan.token_seq_lens is not None
    rows, lens = [], []
    for seq, q_len in enumerate(q_lens):
        for s in range(q_len):
            rows.append(table[seq])
            lens.append(seq_lens[seq] - q_len + s + 1)
    assert plan.token_block_table.tolist() == rows
    assert plan.token_block_table.dtype == dtype
    assert plan.token_seq_lens.tolist() == lens
    return plan


@pytest.mark.parametrize("needs", [AttentionPlanNeeds(), HOST], ids=["npu", "host"])
def test_mixed_decode_and_prefill(needs: AttentionPlanNeeds) -> None:
    _check([1, 4, 1, 7, 1], [9, 4, 2, 12, 17], needs)


@pytest.mark.parametrize("needs", [AttentionPlanNeeds(), HOST], ids=["npu", "host"])
def test_decode_only_and_prefill_only(needs: AttentionPlanNeeds) -> None:
    plan = _check([1, 1, 1], [3, 8, 1], needs)
    assert plan.prefill is None and plan.decode is not None
    plan = _check([5, 9, 3], [5, 9, 10], needs)
    assert plan.decode is None and plan.prefill is not None


@pytest.mark.parametrize("needs", [AttentionPlanNeeds(), HOST], ids=["npu", "host"])
def test_sequences_without_new_tokens_are_in_no_part(needs: AttentionPlanNeeds) -> None:
    # A batch padded with empty requests (q_len 0, seq_len 0), as a graph-padded step is.
    plan = _check([1, 0, 3, 0], [6, 0, 3, 0], needs)
    assert plan.decode is not None and plan.decode.seqs.tolist() == [0]
    assert plan.prefill is not None and plan.prefill.seqs.tolist() == [2]


@pytest.mark.parametrize("needs", [AttentionPlanNeeds(), HOST], ids=["npu", "host"])
def test_empty_steps(needs: AttentionPlanNeeds) -> None:
    plan = _check([0, 0], [0, 0], needs)
    assert plan.parts == () and plan.max_query_len == 0
    plan = _check([], [], needs)
    assert plan.parts == () and plan.num_seqs == 0


@pytest.mark.parametrize("needs", [AttentionPlanNeeds(), HOST], ids=["npu", "host"])
def test_the_mla_split_is_by_position(needs: AttentionPlanNeeds) -> None:
    # vLLM's MLA split: the leading one-token requests are decodes, everything after the
    # first longer one a prefill, one-token requests included.
    plan = _check([1, 1, 1, 21, 1, 39], [9, 4, 2, 30, 7, 39], needs, num_decodes=3)
    assert plan.decode is not None and plan.decode.seqs.tolist() == [0, 1, 2]
    assert plan.prefill is not None and plan.prefill.seqs.tolist() == [3, 4, 5]
    assert plan.prefill.actual_query_lens == (21, 1, 39) and not plan.prefill.is_decode
    plan = _check([2, 3], [2, 3], needs, num_decodes=0)
    assert plan.decode is None and plan.prefill is not None


@pytest.mark.parametrize("needs", [AttentionPlanNeeds(), HOST], ids=["npu", "host"])
def test_a_decode_step_padded_to_a_captured_size_is_decode_rows_of_the_padded_size(
    needs: AttentionPlanNeeds,
) -> None:
    """vLLM's FULL graph padding: 3 decodes padded to 4 (the padding request no token,
    context 0; the padding token past the real ones): one decode part over all 4, its
    indices the identity, the same layout as the captured step of 4."""
    qsl = torch.tensor([0, 1, 2, 3, 3], dtype=torch.int32)
    lens = torch.tensor([5, 9, 2, 0], dtype=torch.int32)
    table = torch.arange(8, dtype=torch.int32).reshape(4, 2)
    plan = build_attention_plan(
        qsl, lens, table, 4, needs=needs, slot_mapping=torch.tensor([3, 8, 13, 1])
    )
    assert plan.prefill is None and plan.decode is not None
    part = plan.decode
    assert part.actual_query_lens == (1, 1, 1, 1) and part.actual_seq_lens == (5, 9, 2, 0)
    for name in ("seqs", "tokens", "padded_rows", "gather"):
        assert getattr(part, name).tolist() == [0, 1, 2, 3], name
    assert part.query_start_loc.tolist() == [0, 1, 2, 3, 4]
    assert part.block_table.tolist() == table.tolist()
    assert plan.num_actual_tokens == 4 and plan.slot_mapping is not None
    assert plan.slot_mapping.tolist() == [3, 8, 13, 1]
    captured = build_attention_plan(
        torch.arange(5, dtype=torch.int32), torch.ones(4, dtype=torch.int32), table, needs=needs
    )
    assert captured.decode is not None
    for name in ("seqs", "tokens", "padded_rows", "gather", "query_start_loc", "query_lens"):
        assert getattr(captured.decode, name).tolist() == getattr(part, name).tolist(), name


def test_padding_rows_take_the_row_past_the_last_token() -> None:
    plan = _check([2, 5], [2, 9], HOST, pad_tokens=3)
    assert plan.prefill is not None
    gather = plan.prefill.gather.tolist()
    assert gather == [0, 1, 7, 7, 7, 2, 3, 4, 5, 6]  # [2, S=5]: 3 padding rows of seq 0
    assert plan.slot_mapping is not None and plan.slot_mapping.numel() == 7


def test_random_batches_match_the_oracle() -> None:
    rng = random.Random(0)
    for _ in range(30):
        b = rng.randint(1, 9)
        q_lens = [rng.choice([0, 1, 1, 1, rng.randint(2, 20)]) for _ in range(b)]
        seq_lens = [q + rng.randint(0, 30) if q else 0 for q in q_lens]
        for needs in (AttentionPlanNeeds(), HOST):
            _check(q_lens, seq_lens, needs)
            # vLLM's boundary: the leading requests of at most one token.
            boundary = next((i for i, q in enumerate(q_lens) if q > 1), b)
            _check(q_lens, seq_lens, needs, num_decodes=boundary)


def test_a_device_plan_takes_the_device_batch_tensors_as_given() -> None:
    qsl = torch.tensor([0, 1, 3], dtype=torch.int32)
    lens = torch.tensor([4, 2], dtype=torch.int32)
    own = (qsl.clone(), lens.clone())
    plan = build_attention_plan(qsl, lens, torch.zeros(2, 1, dtype=torch.int32), on_device=own)
    assert plan.query_start_loc.data_ptr() == own[0].data_ptr()
    assert plan.seq_lens.data_ptr() == own[1].data_ptr()


def test_token_row_decode_makes_each_speculative_token_a_row_ending_at_itself() -> None:
    # Two verifications (4 tokens over 10 cached, 2 over 5), then a 5-token prefill.
    qsl, lens = torch.tensor([0, 4, 6, 11]), torch.tensor([14, 7, 5])
    table = torch.arange(12).view(3, 4)
    plan = build_attention_plan(qsl, lens, table, 11, needs=HOST, num_decodes=2)
    rows = token_row_decode(plan, HOST)
    assert rows is not None and rows.is_decode
    assert rows.actual_seq_lens == (11, 12, 13, 14, 6, 7)
    assert rows.block_table.tolist() == [[0, 1, 2, 3]] * 4 + [[4, 5, 6, 7]] * 2
    assert rows.tokens.tolist() == list(range(6))
    # The same lengths as the plan's own token rows (the host ops' causal lengths).
    assert plan.token_seq_lens is not None
    assert plan.token_seq_lens[:6].tolist() == list(rows.actual_seq_lens)
    assert plan.prefill is not None and plan.prefill.actual_seq_lens == (5,)


def test_token_row_decode_keeps_a_one_token_decode_part_as_it_is() -> None:
    plan = build_attention_plan(torch.tensor([0, 1, 2]), torch.tensor([3, 9]),
                                torch.zeros(2, 1, dtype=torch.int64), needs=HOST)
    assert token_row_decode(plan, HOST) is plan.decode


@pytest.mark.parametrize("needs", [AttentionPlanNeeds(), HOST], ids=["npu", "host"])
def test_a_verify_step_padded_to_a_captured_size_has_the_captured_layout(
    needs: AttentionPlanNeeds,
) -> None:
    """vLLM's FULL graph padding with speculative decoding: 2 requests of 1 + 2 tokens
    padded to 4 (12 tokens; the padding requests no token, context 0). Every request is
    one part of width 3, the padding ones with the padding tokens and nothing to attend
    to, so the step has the layout of the captured step of 4 requests."""
    qsl = torch.tensor([0, 3, 6, 6, 6], dtype=torch.int32)
    lens = torch.tensor([10, 7, 0, 0], dtype=torch.int32)
    table = torch.arange(8, dtype=torch.int32).reshape(4, 2)
    plan = build_attention_plan(qsl, lens, table, 12, needs=needs)
    assert plan.decode is None and plan.prefill is not None
    part = plan.prefill
    assert part.actual_query_lens == (3,) * 4 and part.actual_seq_lens == (10, 7, 0, 0)
    for name in ("tokens", "padded_rows", "gather"):
        assert getattr(part, name).tolist() == list(range(12)), name
    assert part.query_start_loc.tolist() == [0, 3, 6, 9, 12]
    assert part.block_table.tolist() == table.to(part.block_table.dtype).tolist()
    captured = build_attention_plan(
        torch.arange(0, 13, 3, dtype=torch.int32), torch.full((4,), 3, dtype=torch.int32),
        table, needs=needs,
    )
    assert captured.prefill is not None
    for name in ("seqs", "tokens", "padded_rows", "gather", "query_start_loc", "query_lens"):
        assert getattr(captured.prefill, name).tolist() == getattr(part, name).tolist(), name
    if needs.token_rows:  # each token's causal length; a padding token's 0
        assert plan.token_seq_lens is not None
        assert plan.token_seq_lens.tolist() == [8, 9, 10, 5, 6, 7] + [0] * 6


def test_a_padded_verify_step_as_token_rows_writes_into_the_given_buffers() -> None:
    """MLA's split (every request a decode) then a row per token, staged in place: the
    rows' indices in `staging`, their block-table rows in `table_out` (graph mode)."""
    qsl = torch.tensor([0, 3, 6, 6, 6], dtype=torch.int32)
    lens = torch.tensor([10, 7, 0, 0], dtype=torch.int32)
    table = torch.arange(8, dtype=torch.int32).reshape(4, 2)
    plan = build_attention_plan(qsl, lens, table, 12, num_decodes=4)
    assert plan.prefill is None and plan.decode is not None
    staging = torch.zeros(200, dtype=torch.int64)
    table_out = torch.zeros(16, 2, dtype=torch.int32)
    # The host keeps host tensors (no copy to make): the staging is a device's.
    rows = token_row_decode(plan, AttentionPlanNeeds(), staging, table_out)
    assert rows is not None and rows.is_decode
    assert rows.actual_seq_lens == (8, 9, 10, 5, 6, 7) + (0,) * 6
    assert rows.block_table.data_ptr() == table_out.data_ptr()
    assert rows.block_table.tolist() == [[0, 1]] * 3 + [[2, 3]] * 3 + [[4, 5]] * 3 + [[6, 7]] * 3
