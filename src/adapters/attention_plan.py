"""The per-step AttentionPlan, built on the host with array ops and moved to the device.

Every index is computed from the runner's host copies of the batch (query_start_loc,
seq_lens) with torch ops over whole tensors, never a loop over tokens; then each tensor
goes to the device in one copy. Graph mode can keep the same tensors in persistent
buffers of fixed size and copy into them in place instead (`_Mover` is that seam).
"""

from __future__ import annotations

import torch

from ports.ops import AttentionPart, AttentionPlan, AttentionPlanNeeds

_I64 = torch.int64


def build_attention_plan(
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    num_actual_tokens: int | None = None,
    *,
    needs: AttentionPlanNeeds = AttentionPlanNeeds(),  # noqa: B008 (frozen)
    slot_mapping: torch.Tensor | None = None,
    on_device: tuple[torch.Tensor, torch.Tensor] | None = None,
    num_decodes: int | None = None,
) -> AttentionPlan:
    """The plan of a batch of B = len(seq_lens) sequences.

    query_start_loc [>= B + 1] and seq_lens [>= B]: host tensors (the runner's CPU copies;
        entries past B are ignored).
    block_table [>= B, max_blocks] and slot_mapping: already on the device (vLLM's).
    num_actual_tokens: the real tokens (default: query_start_loc[B]).
    on_device: the device's own (query_start_loc, seq_lens), when the caller has them,
        so they are not copied again; else the host tensors are moved.
    needs: what the device's ops read (Ops.plan_needs).
    num_decodes: the decode part is the first num_decodes sequences and the prefill part
        the rest (vLLM's MLA split, where a one-token request past the boundary counts as
        a prefill); None: one new token makes a decode, more a prefill.
    Sequences with no new token are in neither part.
    """
    num_seqs = seq_lens.shape[0]
    qsl = query_start_loc[: num_seqs + 1].to(_I64)
    lens = seq_lens[:num_seqs].to(_I64)
    q_lens = qsl[1:] - qsl[:-1]
    n_tok = int(qsl[-1]) if num_actual_tokens is None else num_actual_tokens
    device = block_table.device
    move = _Mover(device)
    table = block_table[:num_seqs].to(getattr(torch, needs.block_table_dtype))
    qsl_host = tuple(int(v) for v in qsl.tolist())
    lens_host = tuple(int(v) for v in lens.tolist())
    batch_qsl, batch_lens = on_device if on_device is not None else (qsl, lens)
    if num_decodes is None:
        first, rest = q_lens == 1, q_lens > 1
    else:
        leading = torch.arange(num_seqs) < num_decodes
        first, rest = leading & (q_lens > 0), ~leading & (q_lens > 0)
    parts = (
        _part(first, qsl, q_lens, lens, table, n_tok, move),
        _part(rest, qsl, q_lens, lens, table, n_tok, move),
    )
    token_table = token_lens = None
    if needs.token_rows:
        token_table, token_lens = _token_rows(qsl, q_lens, lens, table, move)
    return AttentionPlan(
        query_start_loc=move(batch_qsl[: num_seqs + 1]),
        seq_lens=move(batch_lens[:num_seqs]),
        block_table=table,
        slot_mapping=None if slot_mapping is None else slot_mapping[:n_tok],
        max_query_len=max((part.max_query_len for part in parts if part), default=0),
        max_seq_len=max(lens_host, default=0),
        num_actual_tokens=n_tok,
        query_start_loc_host=qsl_host,
        seq_lens_host=lens_host,
        decode=parts[0],
        prefill=parts[1],
        token_block_table=token_table,
        token_seq_lens=token_lens,
    )


class _Mover:
    """Host tensors to the device, one non-blocking copy each from pinned memory."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def __call__(self, host: torch.Tensor) -> torch.Tensor:
        if host.device == self.device:
            return host
        if host.device.type == "cpu" and not host.is_pinned():
            host = host.pin_memory()
        return host.to(self.device, non_blocking=True)


def _part(
    member: torch.Tensor,
    qsl: torch.Tensor,
    q_lens: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    n_tok: int,
    move: _Mover,
) -> AttentionPart | None:
    """The sequences where `member` holds, padded to their longest query."""
    seqs = member.nonzero().squeeze(1)
    count = seqs.shape[0]
    if count == 0:
        return None
    whole = count == q_lens.shape[0]  # every sequence: the batch's tensors, no gather
    part_q = q_lens if whole else q_lens.index_select(0, seqs)
    part_s = seq_lens if whole else seq_lens.index_select(0, seqs)
    actual_q = tuple(int(v) for v in part_q.tolist())
    width = max(actual_q)
    total = sum(actual_q)
    if whole:
        part_qsl = qsl
    else:
        part_qsl = torch.zeros(count + 1, dtype=_I64)
        torch.cumsum(part_q, 0, out=part_qsl[1:])
    seq_of = torch.repeat_interleave(torch.arange(count), part_q, output_size=total)
    within = torch.arange(total) - part_qsl.index_select(0, seq_of)
    tokens = (qsl if whole else qsl.index_select(0, seqs)).index_select(0, seq_of) + within
    padded_rows = seq_of * width + within
    gather = torch.full((count * width,), n_tok, dtype=_I64)
    gather.index_copy_(0, padded_rows, tokens)
    device_seqs = move(seqs)
    return AttentionPart(
        seqs=device_seqs,
        actual_query_lens=actual_q,
        actual_seq_lens=tuple(int(v) for v in part_s.tolist()),
        max_query_len=width,
        query_start_loc=move(part_qsl),
        query_lens=move(part_q),
        seq_lens=move(part_s),
        block_table=block_table if whole else block_table.index_select(0, device_seqs),
        tokens=move(tokens),
        padded_rows=move(padded_rows),
        gather=move(gather),
    )


def _token_rows(
    qsl: torch.Tensor,
    q_lens: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    move: _Mover,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each new token as one decode row: its sequence's block-table row [T, blocks], and
    its context length [T]: the cached positions and the new tokens up to itself (the
    causal mask, and a chunked prefill's earlier context, in one length)."""
    total = int(qsl[-1])
    seq_of = torch.repeat_interleave(torch.arange(q_lens.shape[0]), q_lens, output_size=total)
    first_new = (seq_lens - q_lens - qsl[:-1]).index_select(0, seq_of)
    return (
        block_table.index_select(0, move(seq_of)),
        move(first_new + torch.arange(1, total + 1)),
    )
