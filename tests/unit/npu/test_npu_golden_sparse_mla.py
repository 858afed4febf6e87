"""Golden tests: NpuSparseMlaOps on the emulated torch_npu against the host's
CpuSparseMlaOps, from the step plan's token rows (a chunked prefill after cached context
and a decode in one batch), at DeepSeek-V3.2's shapes (index heads 64 x 128, latent 512,
rope 64) scaled down in heads, bf16, block size 128.

The emulator computes each call from the docs (semantics_sparse_mla.py), so these check
the adapter's layouts: each token a TND batch of one, PA_BSND views of the paged caches,
int32 lengths and tables, the indices as [T, 1, K]. Bit for bit: both sides compute in
float32 from the same bf16 inputs in the same order and round once.
"""

from __future__ import annotations

import pytest
import torch

from adapters.cpu.sparse_mla import CpuSparseMlaOps
from adapters.npu.sparse_mla import NpuSparseMlaOps
from adapters.torch.attention_plan import build_attention_plan
from ascend_core.errors import UnsupportedFeatureError
from ports.mla import LatentCache
from support.torch_npu_emulator import make_torch_npu

HOST = CpuSparseMlaOps()
HEADS, LATENT, ROPE, INDEX_HEADS, INDEX_DIM, BLOCK, TOPK = 8, 512, 64, 64, 128, 128, 32
BF = torch.bfloat16
Q_LENS, SEQ_LENS = [40, 1], [300, 129]  # a chunk after 260 cached tokens, a decode


@pytest.fixture
def tnpu():
    return make_torch_npu()


def _rows(ops: type) -> tuple[torch.Tensor, torch.Tensor]:
    """(token_block_table, token_seq_lens) of the batch, as each device's plan has them."""
    qsl = torch.tensor([0, *torch.tensor(Q_LENS).cumsum(0).tolist()], dtype=torch.int32)
    table = torch.tensor([[4, 0, 2], [1, 3, 5]], dtype=torch.int32)
    plan = build_attention_plan(qsl, torch.tensor(SEQ_LENS, dtype=torch.int32), table,
                                needs=ops.plan_needs)
    assert plan.token_block_table is not None and plan.token_seq_lens is not None
    return plan.token_block_table, plan.token_seq_lens


def test_the_indexer_keys_and_top_k_match_the_host(tnpu) -> None:  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(0)
    npu = NpuSparseMlaOps(tnpu)
    tokens = sum(Q_LENS)
    host_cache = torch.randn(6, BLOCK, INDEX_DIM, generator=gen).to(BF)
    npu_cache = host_cache.clone()
    keys = torch.randn(tokens, INDEX_DIM, generator=gen).to(BF)
    slots = torch.tensor([4 * BLOCK + 260 % BLOCK + i for i in range(40)] + [5 * BLOCK])
    HOST.write_index_keys(keys, host_cache, slots)
    npu.write_index_keys(keys, npu_cache, slots)
    assert torch.equal(host_cache, npu_cache)
    q = torch.randn(tokens, INDEX_HEADS, INDEX_DIM, generator=gen).to(BF)
    w = torch.randn(tokens, INDEX_HEADS, generator=gen).to(BF)
    (nt, nl), (ht, hl) = _rows(NpuSparseMlaOps), _rows(CpuSparseMlaOps)
    got = npu.index_topk(q, w, npu_cache, nt, nl, max(SEQ_LENS), TOPK)
    want = HOST.index_topk(q, w, host_cache, ht, hl, max(SEQ_LENS), TOPK)
    assert got.dtype == torch.int32 and got.shape == (tokens, TOPK)
    assert torch.equal(got, want)
    assert (want >= 0).all() and (want < hl[:, None]).all()  # causal: never past itself
    assert [c[0] for c in tnpu.calls if c[0] == "npu_lightning_indexer"]


def test_sparse_attention_matches_the_host_bit_for_bit(tnpu) -> None:  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(1)
    npu = NpuSparseMlaOps(tnpu)
    tokens = sum(Q_LENS)
    cache = LatentCache(torch.randn(6, BLOCK, LATENT, generator=gen).to(BF),
                        torch.randn(6, BLOCK, ROPE, generator=gen).to(BF))
    q_lat = torch.randn(tokens, HEADS, LATENT, generator=gen).to(BF)
    q_rope = torch.randn(tokens, HEADS, ROPE, generator=gen).to(BF)
    (nt, nl), (ht, hl) = _rows(NpuSparseMlaOps), _rows(CpuSparseMlaOps)
    # Each token's picks: distinct positions it may see, the short rows padded with -1.
    picks = torch.full((tokens, TOPK), -1, dtype=torch.int32)
    for t in range(tokens):
        n = min(TOPK, int(hl[t]) - (t % 5))
        picks[t, :n] = torch.randperm(int(hl[t]), generator=gen)[:n].to(torch.int32)
    got = npu.sparse_attention(q_lat, q_rope, cache, picks, nt, nl, 0.07)
    want = HOST.sparse_attention(q_lat, q_rope, cache, picks, ht, hl, 0.07)
    assert got.shape == (tokens, HEADS, LATENT) and got.dtype == BF
    torch.testing.assert_close(got, want, atol=0.0, rtol=0.0)


def test_the_ops_refuse_what_their_docs_refuse(tnpu) -> None:  # type: ignore[no-untyped-def]
    npu = NpuSparseMlaOps(tnpu)
    with pytest.raises(UnsupportedFeatureError, match="index_topk 3000"):
        npu.check(HEADS, LATENT, ROPE, INDEX_HEADS, INDEX_DIM, 3000, BLOCK, "bfloat16")
    with pytest.raises(UnsupportedFeatureError, match="dtype float32"):
        npu.check(HEADS, LATENT, ROPE, INDEX_HEADS, INDEX_DIM, 2048, BLOCK, "float32")
    npu.check(HEADS, LATENT, ROPE, INDEX_HEADS, INDEX_DIM, 2048, BLOCK, "bfloat16")
    q = torch.zeros(2, 4, 16)  # float32: the indexer takes float16 and bfloat16 only
    (nt, nl) = _rows(NpuSparseMlaOps)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        npu.index_topk(q, torch.zeros(2, 4), torch.zeros(6, BLOCK, 16), nt[:2], nl[:2], 300, 8)
    # Invalid picks must trail the valid ones, as the docs require.
    cache = LatentCache(torch.zeros(6, BLOCK, 16, dtype=BF), torch.zeros(6, BLOCK, 8, dtype=BF))
    picks = torch.tensor([[-1, 3], [0, 1]], dtype=torch.int32)
    with pytest.raises(ValueError, match="valid entries first"):
        npu.sparse_attention(torch.zeros(2, 2, 16, dtype=BF), torch.zeros(2, 2, 8, dtype=BF),
                             cache, picks, nt[:2], nl[:2], 1.0)
