"""Host-side layout of one paged-attention call for npu_fused_infer_attention_score in BSH.

The ops port hands attention a packed batch ([T, H, D] with query_start_loc); the
NPU op takes a padded one ([B, S, H*D] with per-sequence actual lengths, a list of
ints read on the host). Sequences with one new token go in a group of their own
(S = 1, the op's incremental branch) so a long prefill does not pad every decode.
"""

from __future__ import annotations

from attrs import frozen


@frozen
class AttentionGroup:
    """Sequences laid out together as one [B, S, H*D] query.

    seq_ids: rows of the batch (and of block_table) in this group.
    q_lens / kv_lens: actual_seq_lengths / actual_seq_lengths_kv of the op.
    gather: for each of the B*S padded rows, the packed token it takes; `pad_row`
        (one past the last real token) for padding.
    valid_rows: the padded rows that hold real tokens, in token order of `tokens`.
    tokens: the packed token index of each valid row.
    """

    seq_ids: tuple[int, ...]
    q_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    max_q_len: int
    gather: tuple[int, ...]
    valid_rows: tuple[int, ...]
    tokens: tuple[int, ...]

    @property
    def is_decode(self) -> bool:
        return self.max_q_len == 1


def plan_groups(
    query_start_loc: list[int], seq_lens: list[int], pad_row: int
) -> tuple[AttentionGroup, ...]:
    """Split the batch into a decode group (one new token) and a prefill group (more).

    Sequences with no new tokens are left out: the op has nothing to compute for them.
    """
    decode: list[int] = []
    prefill: list[int] = []
    for i in range(len(seq_lens)):
        q_len = query_start_loc[i + 1] - query_start_loc[i]
        if q_len == 1:
            decode.append(i)
        elif q_len > 1:
            prefill.append(i)
    return tuple(
        _group(ids, query_start_loc, seq_lens, pad_row) for ids in (decode, prefill) if ids
    )


def _group(
    ids: list[int], query_start_loc: list[int], seq_lens: list[int], pad_row: int
) -> AttentionGroup:
    q_lens = [query_start_loc[i + 1] - query_start_loc[i] for i in ids]
    width = max(q_lens)
    gather: list[int] = []
    valid_rows: list[int] = []
    tokens: list[int] = []
    for b, (seq, q_len) in enumerate(zip(ids, q_lens, strict=True)):
        start = query_start_loc[seq]
        for s in range(width):
            if s < q_len:
                gather.append(start + s)
                valid_rows.append(b * width + s)
                tokens.append(start + s)
            else:
                gather.append(pad_row)
    return AttentionGroup(
        seq_ids=tuple(ids),
        q_lens=tuple(q_lens),
        kv_lens=tuple(seq_lens[i] for i in ids),
        max_q_len=width,
        gather=tuple(gather),
        valid_rows=tuple(valid_rows),
        tokens=tuple(tokens),
    )
