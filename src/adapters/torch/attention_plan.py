"""The per-step AttentionPlan, built on the host with array ops and moved to the device.

Every index is computed from the runner's host copies of the batch (query_start_loc,
seq_lens) with torch ops over whole tensors, never a loop over tokens; then all of them
go to the device in one copy (each tensor a view of it). Graph mode can keep the same
tensors in a persistent buffer of fixed size: with `staging` the indices are copied into
it in place, so a captured step reads the same memory every step.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

import torch
from attrs import frozen

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
    staging: torch.Tensor | None = None,
    staging_host: torch.Tensor | None = None,
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
    staging: a persistent int64 buffer on the device (graph mode): the derived indices
        are written into it in place (when they fit), so that a step of the same shape
        finds them at the same addresses; else they go to a fresh device tensor.
    staging_host: the pinned host twin of `staging` (a step whose inputs go to the device
        in one copy of the runner's staging arena): the indices are written there, and
        the copy that sends them is the caller's.
    Sequences with no new token are in neither part, except in a uniform decode batch
    padded to a captured size (num_actual_tokens == B, at most one new token each): there
    every sequence is a decode row, a padding one with its context length (vLLM's 0).
    Likewise a speculative verify step (every request Q = 1 + k tokens, padded or not:
    num_actual_tokens == B * Q) is one part of width Q over all B sequences, a padding
    one taking Q padding tokens and attending to nothing.
    """
    num_seqs = seq_lens.shape[0]
    qsl = query_start_loc[: num_seqs + 1].to(_I64)
    lens = seq_lens[:num_seqs].to(_I64)
    q_lens = qsl[1:] - qsl[:-1]
    n_tok = int(qsl[-1]) if num_actual_tokens is None else num_actual_tokens
    table = block_table[:num_seqs].to(getattr(torch, needs.block_table_dtype.value))
    qsl_host = tuple(int(v) for v in qsl.tolist())
    lens_host = tuple(int(v) for v in lens.tolist())
    host_parts: list[_HostPart | None]
    # Every sequence one new token (a decode step), or a decode step padded to a captured
    # size (padding sequences have none, padding tokens past them): the indices are the
    # identity over all B sequences, the same for every step of that size.
    one_each = (
        num_seqs > 0
        and n_tok == num_seqs
        and all(b - a <= 1 for a, b in pairwise(qsl_host))
        and (num_decodes is None or num_decodes == num_seqs)
    )
    width = None if one_each else _uniform_width(qsl_host, n_tok, num_decodes)
    if one_each:
        host_parts = [_uniform(num_seqs, 1, lens, lens_host), None]
    elif width:  # a speculative verify step: the decode part with MLA's split, else prefill
        uniform = _uniform(num_seqs, width, lens, lens_host)
        host_parts = [uniform, None] if num_decodes is not None else [None, uniform]
    else:
        if num_decodes is None:
            first, rest = q_lens == 1, q_lens > 1
        else:
            leading = torch.arange(num_seqs) < num_decodes
            first, rest = leading & (q_lens > 0), ~leading & (q_lens > 0)
        host_parts = [_host_part(member, qsl, q_lens, lens, n_tok) for member in (first, rest)]
    # Everything the device reads, in one list: the batch's offsets and lengths (unless
    # the caller has them there), each part's indices, the token rows.
    staged: list[torch.Tensor] = [] if on_device is not None else [qsl, lens]
    for part in host_parts:
        staged += part.tensors() if part is not None else []
    token_seqs = token_lens = None
    if needs.token_rows and one_each:  # each token its sequence's one row
        token_seqs, token_lens = torch.arange(num_seqs), lens
    elif needs.token_rows and width:
        token_seqs, token_lens = _uniform_rows(num_seqs, width, lens)
    elif needs.token_rows:
        token_seqs, token_lens = _token_rows(qsl, q_lens, lens)
    if token_seqs is not None and token_lens is not None:
        staged += [token_seqs, token_lens]
    moved = iter(_to_device(staged, block_table.device, staging, staging_host))
    batch_qsl, batch_lens = on_device if on_device is not None else (next(moved), next(moved))
    parts = [None if part is None else part.on_device(moved, table) for part in host_parts]
    token_table = None
    if token_seqs is not None:
        rows = next(moved)
        # A decode step's rows are the sequences': the table itself (vLLM's persistent
        # one, which a captured graph reads each step), not a copy.
        token_table = table if one_each else table.index_select(0, rows)
        token_lens = next(moved)
    return AttentionPlan(
        query_start_loc=batch_qsl[: num_seqs + 1],
        seq_lens=batch_lens[:num_seqs],
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


def _to_device(
    host: list[torch.Tensor],
    device: torch.device,
    staging: torch.Tensor | None = None,
    staging_host: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """The int64 host tensors on `device`: one non-blocking copy of all of them from
    pinned memory (one launch a step, not one a tensor), each a view of it; into the front
    of `staging` in place when they fit there; with `staging_host` (its pinned twin) into
    that instead, for the caller's one copy of the whole arena."""
    if device.type == "cpu" or not host:
        return host
    flat = torch.cat([t.reshape(-1) for t in host])
    if staging is not None and flat.numel() <= staging.numel():
        on_device = staging[: flat.numel()]
        if staging_host is not None:
            staging_host[: flat.numel()].copy_(flat)
        else:
            on_device.copy_(flat.pin_memory(), non_blocking=True)
    else:
        on_device = flat.pin_memory().to(device, non_blocking=True)
    return list(on_device.split([t.numel() for t in host]))


@frozen
class _HostPart:
    """A part's host-side values, before its tensors go to the device."""

    seqs: torch.Tensor
    actual_query_lens: tuple[int, ...]
    actual_seq_lens: tuple[int, ...]
    query_start_loc: torch.Tensor
    query_lens: torch.Tensor
    seq_lens: torch.Tensor
    tokens: torch.Tensor
    padded_rows: torch.Tensor
    gather: torch.Tensor
    whole: bool  # every sequence of the batch: its block table as it is
    in_order: bool = False  # AttentionPart.in_order: the indices are the identity

    def tensors(self) -> list[torch.Tensor]:
        return [
            self.seqs, self.query_start_loc, self.query_lens, self.seq_lens,
            self.tokens, self.padded_rows, self.gather,
        ]

    def on_device(self, moved: Iterator[torch.Tensor], table: torch.Tensor) -> AttentionPart:
        """The part with its tensors taken, in tensors()' order, from `moved`."""
        seqs, qsl, q_lens, seq_lens, tokens, padded_rows, gather = (
            next(moved) for _ in range(7)
        )
        return AttentionPart(
            seqs=seqs,
            actual_query_lens=self.actual_query_lens,
            actual_seq_lens=self.actual_seq_lens,
            max_query_len=max(self.actual_query_lens),
            query_start_loc=qsl,
            query_lens=q_lens,
            seq_lens=seq_lens,
            block_table=table if self.whole else table.index_select(0, seqs),
            tokens=tokens,
            padded_rows=padded_rows,
            gather=gather,
            in_order=self.in_order,
        )


def _uniform_width(
    qsl_host: tuple[int, ...], n_tok: int, num_decodes: int | None
) -> int | None:
    """Q > 1 when the batch is a uniform speculative decode step (every sequence Q new
    tokens: 1 + k) or one padded to a captured size (vLLM's padding sequences last, with
    no token, and the padding tokens Q for each of them); else None."""
    num_seqs = len(qsl_host) - 1
    if num_seqs <= 0 or num_decodes not in (None, num_seqs):
        return None
    q_lens = [b - a for a, b in pairwise(qsl_host)]
    width = max(q_lens)
    real = sum(1 for q in q_lens if q)
    padded = [width] * real + [0] * (num_seqs - real)
    if width <= 1 or n_tok != num_seqs * width or q_lens != padded:
        return None
    return width


def _uniform(
    num_seqs: int, width: int, seq_lens: torch.Tensor, lens_host: tuple[int, ...]
) -> _HostPart:
    """Every sequence of a uniform step (a decode step: width 1; a verify step: 1 + k)
    as one part of `width` tokens, padding sequences too: their tokens are the batch's
    padding tokens and their context length is vLLM's 0 (they attend to nothing), so a
    step padded to a captured size has the layout of the captured one, the same shapes at
    the same addresses."""
    tokens = torch.arange(num_seqs * width)
    return _HostPart(
        seqs=torch.arange(num_seqs),
        actual_query_lens=(width,) * num_seqs,
        actual_seq_lens=lens_host,
        query_start_loc=torch.arange(num_seqs + 1) * width,
        query_lens=torch.full((num_seqs,), width, dtype=_I64),
        seq_lens=seq_lens,
        tokens=tokens,
        padded_rows=tokens,
        gather=tokens,
        whole=True,
        in_order=True,
    )


def _uniform_rows(
    num_seqs: int, width: int, seq_lens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """_token_rows of a uniform step: token j of a sequence of context c sees
    c - width + j + 1 positions; a padding sequence's tokens (c = 0) see none."""
    seq_of = torch.arange(num_seqs).repeat_interleave(width)
    within = torch.arange(width).repeat(num_seqs)
    lens = seq_lens.index_select(0, seq_of)
    return seq_of, torch.where(lens > 0, lens - width + within + 1, 0)


def _host_part(
    member: torch.Tensor,
    qsl: torch.Tensor,
    q_lens: torch.Tensor,
    seq_lens: torch.Tensor,
    n_tok: int,
) -> _HostPart | None:
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
    return _HostPart(
        seqs=seqs,
        actual_query_lens=actual_q,
        actual_seq_lens=tuple(int(v) for v in part_s.tolist()),
        query_start_loc=part_qsl,
        query_lens=part_q,
        seq_lens=part_s,
        tokens=tokens,
        padded_rows=padded_rows,
        gather=gather,
        whole=whole,
    )


def _token_rows(
    qsl: torch.Tensor, q_lens: torch.Tensor, seq_lens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each new token as one decode row: its sequence (whose block-table row it reads),
    and its context length [T]: the cached positions and the new tokens up to itself
    (the causal mask, and a chunked prefill's earlier context, in one length)."""
    total = int(qsl[-1])
    seq_of = torch.repeat_interleave(torch.arange(q_lens.shape[0]), q_lens, output_size=total)
    first_new = (seq_lens - q_lens - qsl[:-1]).index_select(0, seq_of)
    return seq_of, first_new + torch.arange(1, total + 1)


def token_row_decode(
    plan: AttentionPlan,
    needs: AttentionPlanNeeds,
    staging: torch.Tensor | None = None,
    table_out: torch.Tensor | None = None,
) -> AttentionPart | None:
    """The plan's decode part with every new token a one-token row of its own.

    A speculative decode verifies 1 + k tokens of one request; as rows of their own, each
    token attends to its cached context and the request's tokens up to itself (its length
    says so: the causal mask in one number), so an attention op that takes one query
    token per row (MLA's absorbed decode) verifies them. The decode sequences lead the
    batch (vLLM reorders them first), so row i is batch token i. A padding sequence's rows
    (context length 0) attend to nothing. None: no decode part.

    staging, table_out (graph mode): persistent device buffers the rows' indices and
    their block-table rows are written into in place (when they fit), so a captured step
    reads them at the same addresses every step.
    """
    decode = plan.decode
    if decode is None or decode.is_decode:
        return decode
    q_lens = torch.tensor(decode.actual_query_lens, dtype=_I64)
    lens = torch.tensor(decode.actual_seq_lens, dtype=_I64)
    total = int(q_lens.sum())
    seq_of = torch.repeat_interleave(torch.arange(q_lens.shape[0]), q_lens, output_size=total)
    # Token j of a request with context c (its cached tokens) and q new ones sees c + j + 1.
    first = lens - q_lens - (torch.cumsum(q_lens, 0) - q_lens)  # c minus the request's start
    token_lens = (first.index_select(0, seq_of) + torch.arange(1, total + 1)).clamp_(min=0)
    # Each token's block-table row, gathered on the device (no host round trip).
    rows = torch.repeat_interleave(decode.query_lens, output_size=total)
    if table_out is not None and total <= table_out.shape[0]:
        table = torch.index_select(decode.block_table, 0, rows, out=table_out[:total])
    else:
        table = decode.block_table.index_select(0, rows)
    rows_plan = build_attention_plan(
        torch.arange(total + 1), token_lens, table, total, needs=needs, staging=staging
    )
    return rows_plan.decode
