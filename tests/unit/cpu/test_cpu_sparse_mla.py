"""CpuSparseMlaOps against a per-token loop written from the port's docstrings."""

from __future__ import annotations

import torch

from adapters.cpu.sparse_mla import CpuSparseMlaOps
from ports.mla import LatentCache

BLOCK = 4


def _paged(rows: torch.Tensor, table: list[int]) -> torch.Tensor:
    """A [blocks, BLOCK, D] cache holding rows (a sequence's positions) at table's blocks."""
    cache = torch.randn(8, BLOCK, rows.shape[-1])  # stale rows elsewhere
    for p in range(rows.shape[0]):
        cache[table[p // BLOCK], p % BLOCK] = rows[p]
    return cache


def _loop_topk(q, w, keys, lens, topk):  # type: ignore[no-untyped-def]
    out = torch.full((q.shape[0], topk), -1, dtype=torch.int32)
    for t in range(q.shape[0]):
        n = int(lens[t])
        score = torch.stack([(w[t] * (q[t] @ keys[p]).relu()).sum() for p in range(n)])
        picked = score.topk(min(topk, n)).indices
        out[t, : picked.numel()] = picked.to(torch.int32)
    return out


def test_index_topk_picks_the_highest_scores_before_each_token() -> None:
    torch.manual_seed(0)
    seq, heads, dim, topk = 11, 3, 8, 4
    keys = torch.randn(seq, dim)
    table = [5, 2, 7]
    cache = _paged(keys, table)
    q, w = torch.randn(seq, heads, dim), torch.randn(seq, heads)
    lens = torch.arange(1, seq + 1)  # a prefill: token t sees positions 0 .. t
    block_table = torch.tensor([table] * seq)
    got = CpuSparseMlaOps().index_topk(q, w, cache, block_table, lens, seq, topk)
    want = _loop_topk(q, w, keys, lens, topk)
    assert torch.equal(got, want)
    assert (got[:3, 3] == -1).all() and (got[3:] >= 0).all()  # fewer than top-k: -1 pads
    assert (got.max(dim=1).values < lens).all()  # never a later position


def test_sparse_attention_attends_over_the_selected_rows_only() -> None:
    torch.manual_seed(1)
    seq, heads, latent, rope = 9, 2, 6, 2
    rows = torch.randn(seq, latent + rope)
    table = [3, 0, 6]
    cache = LatentCache(_paged(rows[:, :latent], table), _paged(rows[:, latent:], table))
    q_lat, q_rope = torch.randn(2, heads, latent), torch.randn(2, heads, rope)
    indices = torch.tensor([[4, 0, 8, -1], [2, -1, -1, -1]], dtype=torch.int32)
    got = CpuSparseMlaOps().sparse_attention(
        q_lat, q_rope, cache, indices, torch.tensor([table, table]), torch.tensor([9, 3]), 0.5
    )
    for t, picked in enumerate(([4, 0, 8], [2])):
        sel = rows[picked]
        score = torch.cat((q_lat[t], q_rope[t]), -1) @ sel.T * 0.5
        want = score.softmax(-1) @ sel[:, :latent]
        torch.testing.assert_close(got[t], want)


def test_write_index_keys_skips_padding_slots() -> None:
    cache = torch.zeros(3, BLOCK, 2)
    keys = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    CpuSparseMlaOps().write_index_keys(keys, cache, torch.tensor([5, -1]))
    assert torch.equal(cache[1, 1], keys[0])
    assert cache.count_nonzero() == 2  # the -1 slot and the padding row past it unwritten
