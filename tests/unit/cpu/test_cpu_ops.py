"""CpuOps (and ReferenceOps, its fallback) against the naive loops of support.reference_ops,
on random inputs."""

from __future__ import annotations

import math

import attrs
import pytest
import torch

from adapters.cpu.ops import CpuOps
from adapters.cpu.reference_ops import ReferenceOps
from adapters.torch.attention_plan import build_attention_plan
from ports.ops import AttentionPlan
from support import reference_ops as ref

OPS = CpuOps(native_attention=False, native_write=False)

# float32 results come from float32 arithmetic (eps 1.2e-7) summed over <= a few hundred
# terms, against a float64 oracle: 1e-5 leaves two orders of magnitude of slack.
# bfloat16 results are float32 math rounded once or twice to an 8-bit mantissa
# (relative step 2**-8 = 0.0039): 1.6e-2 covers two roundings plus the inputs' own.
TOL = {
    torch.float32: {"atol": 2e-5, "rtol": 1e-5},
    torch.bfloat16: {"atol": 1.6e-2, "rtol": 1.6e-2},
}
DTYPES = [torch.float32, torch.bfloat16]


def _close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    assert actual.dtype == dtype
    torch.testing.assert_close(actual.to(torch.float64), expected.to(torch.float64), **TOL[dtype])


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_matches_formula(dtype: torch.dtype, gen: torch.Generator) -> None:
    x = torch.randn(7, 3, 64, generator=gen).to(dtype)
    w = (1 + 0.1 * torch.randn(64, generator=gen)).to(dtype)
    _close(OPS.rms_norm(x, w, 1e-6), ref.rms_norm(x, w, 1e-6), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm_returns_norm_and_sum(dtype: torch.dtype, gen: torch.Generator) -> None:
    x = torch.randn(5, 96, generator=gen).to(dtype)
    r = torch.randn(5, 96, generator=gen).to(dtype)
    w = torch.randn(96, generator=gen).to(dtype)
    normed, summed = OPS.add_rms_norm(x, r, w, 1e-5)
    exp_normed, exp_summed = ref.add_rms_norm(x, r, w, 1e-5)
    _close(summed, exp_summed, dtype)
    # The norm is of the sum as returned (rounded to dtype), as the next layer sees it.
    _close(normed, ref.rms_norm(summed, w, 1e-5), dtype)
    if dtype == torch.float32:
        _close(normed, exp_normed, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul_matches_formula(dtype: torch.dtype, gen: torch.Generator) -> None:
    x = torch.randn(4, 9, 2 * 48, generator=gen).to(dtype)
    out = OPS.silu_and_mul(x)
    assert out.shape == (4, 9, 48)
    _close(out, ref.silu_and_mul(x), dtype)


def _cos_sin_cache(max_pos: int, rotary_dim: int, base: float = 10000.0) -> torch.Tensor:
    inv_freq = 1.0 / base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float64), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).float()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("rotary_dim", [32, 16])
def test_rotary_embedding_styles_and_partial_dim(
    dtype: torch.dtype, neox: bool, rotary_dim: int, gen: torch.Generator
) -> None:
    head_size, hq, hk, tokens = 32, 4, 2, 6
    cache = _cos_sin_cache(64, rotary_dim)
    positions = torch.tensor([0, 1, 5, 17, 63, 2])
    q = torch.randn(tokens, hq * head_size, generator=gen).to(dtype)
    k = torch.randn(tokens, hk * head_size, generator=gen).to(dtype)
    q_before, k_before = q.clone(), k.clone()
    q_out, k_out = OPS.rotary_embedding(positions, q, k, cache, head_size, rotary_dim, neox)
    exp_q, exp_k = ref.rotary_embedding(positions, q, k, cache, head_size, rotary_dim, neox)
    assert q_out.shape == q.shape and k_out.shape == k.shape
    _close(q_out, exp_q, dtype)
    _close(k_out, exp_k, dtype)
    assert torch.equal(q, q_before) and torch.equal(k, k_before)  # inputs untouched
    tail_q = q_out.reshape(tokens, hq, head_size)[..., rotary_dim:]
    assert torch.equal(tail_q, q.reshape(tokens, hq, head_size)[..., rotary_dim:])


def test_rotary_position_zero_is_identity(gen: torch.Generator) -> None:
    q = torch.randn(3, 64, generator=gen)
    k = torch.randn(3, 64, generator=gen)
    zeros = torch.zeros(3, dtype=torch.long)
    q_out, k_out = OPS.rotary_embedding(zeros, q, k, _cos_sin_cache(8, 32), 32, 32, True)
    torch.testing.assert_close(q_out, q)
    torch.testing.assert_close(k_out, k)


def test_rotary_accepts_three_dimensional_heads(gen: torch.Generator) -> None:
    q = torch.randn(3, 4, 32, generator=gen)
    k = torch.randn(3, 2, 32, generator=gen)
    pos = torch.tensor([3, 4, 5])
    cache = _cos_sin_cache(8, 32)
    q_out, k_out = OPS.rotary_embedding(pos, q, k, cache, 32, 32, True)
    q_flat, k_flat = OPS.rotary_embedding(
        pos, q.reshape(3, -1), k.reshape(3, -1), cache, 32, 32, True
    )
    assert q_out.shape == (3, 4, 32) and k_out.shape == (3, 2, 32)
    torch.testing.assert_close(q_out.reshape(3, -1), q_flat)
    torch.testing.assert_close(k_out.reshape(3, -1), k_flat)


@pytest.mark.parametrize("dtype", DTYPES)
def test_write_kv_cache_scatters_and_skips_minus_one(
    dtype: torch.dtype, gen: torch.Generator
) -> None:
    nb, bs, hk, d = 6, 4, 2, 8
    key = torch.randn(5, hk, d, generator=gen).to(dtype)
    value = torch.randn(5, hk, d, generator=gen).to(dtype)
    slots = torch.tensor([0, 7, -1, 23, 9])
    kc, vc = torch.zeros(nb, bs, hk, d, dtype=dtype), torch.zeros(nb, bs, hk, d, dtype=dtype)
    ekc, evc = kc.clone(), vc.clone()
    OPS.write_kv_cache(key, value, kc, vc, slots)
    ref.write_kv_cache(key, value, ekc, evc, slots)
    assert torch.equal(kc, ekc) and torch.equal(vc, evc)
    assert int((kc != 0).any(dim=(2, 3)).sum()) == 4  # four slots written, -1 skipped


def test_write_kv_cache_through_non_contiguous_views(gen: torch.Generator) -> None:
    nb, bs, hk, d = 5, 4, 2, 8
    # One allocation [num_blocks, 2, block_size, Hk, D]; key/value caches are strided views.
    storage = torch.zeros(nb, 2, bs, hk, d)
    kc, vc = storage[:, 0], storage[:, 1]
    assert not kc.is_contiguous()
    key = torch.randn(4, hk, d, generator=gen)
    value = torch.randn(4, hk, d, generator=gen)
    slots = torch.tensor([3, 4, -1, 19])
    OPS.write_kv_cache(key, value, kc, vc, slots)
    ekc, evc = torch.zeros(nb, bs, hk, d), torch.zeros(nb, bs, hk, d)
    ref.write_kv_cache(key, value, ekc, evc, slots)
    assert torch.equal(storage[:, 0], ekc) and torch.equal(storage[:, 1], evc)


def test_write_kv_cache_ignores_padding_tokens_past_slot_mapping(gen: torch.Generator) -> None:
    kc, vc = torch.zeros(2, 4, 1, 4), torch.zeros(2, 4, 1, 4)
    key = torch.randn(6, 1, 4, generator=gen)
    OPS.write_kv_cache(key, key, kc, vc, torch.tensor([1, 2]))
    assert torch.equal(kc[0, 1:3], key[:2])
    assert int((kc != 0).any(dim=(2, 3)).sum()) == 2


def _paged_batch(
    q_lens: list[int],
    seq_lens: list[int],
    hq: int,
    hk: int,
    d: int,
    block_size: int,
    dtype: torch.dtype,
    gen: torch.Generator,
    pad_tokens: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, AttentionPlan]:
    """Random caches, shuffled block ids, and NaN in every unused cache row."""
    blocks_per_seq = [-(-s // block_size) for s in seq_lens]
    num_blocks = sum(blocks_per_seq) + 3
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    table = []
    for n in blocks_per_seq:
        table.append(perm[:n])
        perm = perm[n:]
    width = max(blocks_per_seq)
    kc = torch.full((num_blocks, block_size, hk, d), float("nan"))
    vc = torch.full((num_blocks, block_size, hk, d), float("nan"))
    for blocks, seq_len in zip(table, seq_lens, strict=True):
        for pos in range(seq_len):
            kc[blocks[pos // block_size], pos % block_size] = torch.randn(hk, d, generator=gen)
            vc[blocks[pos // block_size], pos % block_size] = torch.randn(hk, d, generator=gen)
    qsl = [0]
    for n in q_lens:
        qsl.append(qsl[-1] + n)
    query = torch.randn(qsl[-1] + pad_tokens, hq, d, generator=gen)
    padded_table = [row + [0] * (width - len(row)) for row in table]
    meta = build_attention_plan(
        torch.tensor(qsl, dtype=torch.int32),
        torch.tensor(seq_lens, dtype=torch.int32),
        torch.tensor(padded_table, dtype=torch.int32),
        needs=CpuOps.plan_needs,
    )
    return query.to(dtype), kc.to(dtype), vc.to(dtype), meta


def _check_attention(
    q_lens: list[int],
    seq_lens: list[int],
    hq: int = 4,
    hk: int = 2,
    d: int = 16,
    block_size: int = 4,
    dtype: torch.dtype = torch.float32,
    pad_tokens: int = 0,
    seed: int = 0,
    ops: ReferenceOps = OPS,
    window: int | None = None,
    sinks: torch.Tensor | None = None,
) -> None:
    gen = torch.Generator().manual_seed(seed)
    query, kc, vc, meta = _paged_batch(
        q_lens, seq_lens, hq, hk, d, block_size, dtype, gen, pad_tokens
    )
    if window is not None:
        # vLLM frees blocks wholly before every new token's window: they read as its null
        # block, whose rows here are NaN (a spare block: never written).
        null = kc.shape[0] - 1
        for row, (q_len, seq_len) in enumerate(zip(q_lens, seq_lens, strict=True)):
            before = max(0, seq_len - q_len - window + 1) // block_size
            meta.block_table[row, :before] = null
            for part in meta.parts:
                hit = (part.seqs == row).nonzero()
                if hit.numel():
                    part.block_table[int(hit[0, 0]), :before] = null
    scale = 1 / math.sqrt(d)
    sentinel = 7.0
    out = torch.full(query.shape, sentinel, dtype=dtype)
    result = ops.paged_attention(query, kc, vc, meta, scale, out, window=window, sinks=sinks)
    assert result is out
    expected = ref.paged_attention(
        query,
        kc,
        vc,
        meta.query_start_loc.tolist(),
        seq_lens,
        meta.block_table.tolist(),
        scale,
        window=window,
        sinks=sinks,
    )
    n = meta.num_actual_tokens
    assert torch.isfinite(out[:n].float()).all()
    _close(out[:n], expected[:n], dtype)
    assert bool((out[n:] == sentinel).all())  # padding rows untouched


@pytest.mark.parametrize(
    "ops", [OPS, CpuOps(native_attention=False, native_write=False)], ids=["reference", "cpu"]
)
@pytest.mark.parametrize("window", [None, 3, 6])
@pytest.mark.parametrize("with_sinks", [False, True])
def test_attention_window_and_sinks(
    ops: ReferenceOps, window: int | None, with_sinks: bool
) -> None:
    """Decodes, a fresh prefill and a chunked prefill in one batch, with a sliding window
    shorter than the contexts (freed blocks read as NaN) and/or per-head sink logits."""
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0]) if with_sinks else None
    _check_attention(
        [1, 7, 1, 4], [9, 7, 3, 13], window=window, sinks=sinks, ops=ops, pad_tokens=2
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_decode_batch(dtype: torch.dtype) -> None:
    _check_attention([1, 1, 1, 1], [1, 5, 13, 8], dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_decode_batch_on_the_torch_path(dtype: torch.dtype) -> None:
    # The path taken where the native decode kernel does not build.
    ops = CpuOps(native_attention=False, native_write=False)
    _check_attention([1, 1, 1, 1], [1, 5, 13, 8], dtype=dtype, ops=ops)
    _check_attention([1, 4, 1, 7, 1], [9, 4, 2, 12, 17], dtype=dtype, ops=ops)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_prefill_batch(dtype: torch.dtype) -> None:
    _check_attention([5, 9, 1 + 2], [5, 9, 3], dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_prefill_of_equal_lengths_needs_no_padding(dtype: torch.dtype) -> None:
    # Every sequence has max_query_len tokens: the query is viewed, not padded, both for
    # fresh prompts and for chunks after cached context.
    _check_attention([6, 6, 6], [6, 6, 6], dtype=dtype, pad_tokens=2)
    _check_attention([4, 4], [9, 5], dtype=dtype, pad_tokens=1)


def test_attention_chunked_prefill_sees_earlier_context() -> None:
    # q_len < seq_len: the new tokens follow context already in the cache.
    _check_attention([3, 6], [10, 7])


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_mixed_prefill_and_decode(dtype: torch.dtype) -> None:
    _check_attention([1, 4, 1, 7, 1], [9, 4, 2, 12, 17], dtype=dtype)


def test_attention_sequence_spanning_many_blocks() -> None:
    _check_attention([1, 2], [130, 97], block_size=4, hq=2, hk=1)


@pytest.mark.parametrize("group", [1, 2, 4])
def test_attention_query_groups(group: int) -> None:
    _check_attention([2, 1, 3], [6, 5, 3], hq=2 * group, hk=2)


def test_attention_leaves_padding_rows_alone() -> None:
    _check_attention([2, 1], [4, 3], pad_tokens=3)
    _check_attention([1, 1], [4, 3], pad_tokens=2)


def test_attention_skips_sequences_without_new_tokens() -> None:
    # A batch padded with empty requests (q_len 0, seq_len 0), as a graph-padded step may be.
    gen = torch.Generator().manual_seed(3)
    query, kc, vc, meta = _paged_batch([1, 3], [6, 3], 4, 2, 16, 4, torch.float32, gen)
    padded = build_attention_plan(
        torch.tensor([0, 1, 4, 4], dtype=torch.int32),
        torch.tensor([6, 3, 0], dtype=torch.int32),
        torch.cat([meta.block_table, torch.zeros(1, 2, dtype=torch.int64)]),
        needs=CpuOps.plan_needs,
    )
    out = OPS.paged_attention(query, kc, vc, padded, 0.25, torch.empty_like(query))
    expected = ref.paged_attention(
        query, kc, vc, [0, 1, 4], [6, 3], meta.block_table.tolist(), 0.25
    )
    torch.testing.assert_close(out.double(), expected, **TOL[torch.float32])


def test_attention_accepts_non_contiguous_caches() -> None:
    gen = torch.Generator().manual_seed(5)
    query, kc, vc, meta = _paged_batch([1, 3], [7, 5], 4, 2, 16, 4, torch.float32, gen)
    storage = torch.stack((kc, vc), dim=1)  # [num_blocks, 2, block_size, Hk, D]
    out = OPS.paged_attention(
        query, storage[:, 0], storage[:, 1], meta, 0.25, torch.empty_like(query)
    )
    expected = ref.paged_attention(
        query, kc, vc, [0, 1, 4], [7, 5], meta.block_table.tolist(), 0.25
    )
    torch.testing.assert_close(out.double(), expected, **TOL[torch.float32])


def test_write_then_attend_round_trip(gen: torch.Generator) -> None:
    # Prefill writes its own keys, then attends over them: equals plain causal attention.
    t, hq, hk, d, bs = 6, 4, 2, 8, 4
    q = torch.randn(t, hq, d, generator=gen)
    k = torch.randn(t, hk, d, generator=gen)
    v = torch.randn(t, hk, d, generator=gen)
    kc, vc = torch.zeros(3, bs, hk, d), torch.zeros(3, bs, hk, d)
    slots = torch.tensor([8, 9, 10, 11, 4, 5])  # blocks 2 then 1
    OPS.write_kv_cache(k, v, kc, vc, slots)
    meta = build_attention_plan(
        torch.tensor([0, t]), torch.tensor([t]), torch.tensor([[2, 1]]), needs=CpuOps.plan_needs
    )
    out = OPS.paged_attention(q, kc, vc, meta, 0.5, torch.empty_like(q))
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1),
        k.repeat_interleave(2, 1).transpose(0, 1),
        v.repeat_interleave(2, 1).transpose(0, 1),
        is_causal=True,
        scale=0.5,
    ).transpose(0, 1)
    torch.testing.assert_close(out, expected, atol=2e-5, rtol=1e-5)


def test_float32_rms_norms_equal_the_spelled_out_float32_formula(gen: torch.Generator) -> None:
    # The fused kernel is taken for float32; greedy parity with HF needs the same numbers
    # as the cast-and-scale form it replaced, not merely close ones.
    x = torch.randn(16, 768, generator=gen)
    r = torch.randn(16, 768, generator=gen)
    w = 1 + 0.1 * torch.randn(768, generator=gen)
    spelled = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(OPS.rms_norm(x, w, 1e-6), spelled, atol=1e-6, rtol=1e-6)
    normed, summed = OPS.add_rms_norm(x, r, w, 1e-6)
    assert torch.equal(summed, x + r)
    torch.testing.assert_close(normed, OPS.rms_norm(x + r, w, 1e-6), atol=0, rtol=0)


def test_full_width_rotary_returns_new_tensors(gen: torch.Generator) -> None:
    q = torch.randn(3, 2 * 8, generator=gen)
    k = torch.randn(3, 8, generator=gen)
    before = q.clone(), k.clone()
    cache = torch.randn(10, 8, generator=gen)
    new_q, new_k = OPS.rotary_embedding(torch.tensor([1, 4, 9]), q, k, cache, 8, 8, True)
    assert new_q.data_ptr() != q.data_ptr() and new_k.data_ptr() != k.data_ptr()
    assert torch.equal(q, before[0]) and torch.equal(k, before[1])


def test_context_slots_are_computed_once_per_metadata(mocker) -> None:  # type: ignore[no-untyped-def]
    import adapters.cpu.reference_ops as ops_module

    gen = torch.Generator().manual_seed(9)
    # The torch path's decode slots (the kernel needs none).
    ops = CpuOps(native_attention=False, native_write=False)
    query, kc, vc, meta = _paged_batch([1, 4, 1], [9, 4, 6], 4, 2, 16, 4, torch.float32, gen)
    spy = mocker.spy(ops_module, "_context_slots")
    first = ops.paged_attention(query, kc, vc, meta, 0.25, torch.empty_like(query)).clone()
    second = ops.paged_attention(query, kc, vc, meta, 0.25, torch.empty_like(query))
    assert spy.call_count == 2  # the decode part and the prefill part, once each
    assert torch.equal(first, second)
    next_step = attrs.evolve(meta)  # equal contents, but another step's object
    ops.paged_attention(query, kc, vc, next_step, 0.25, torch.empty_like(query))
    assert spy.call_count == 4


def test_write_positions_are_computed_once_per_slot_mapping(mocker) -> None:  # type: ignore[no-untyped-def]
    import adapters.cpu.reference_ops as ops_module

    gen = torch.Generator().manual_seed(4)
    # The index_put_ path, which derives positions.
    ops = CpuOps(native_attention=False, native_write=False)
    spy = mocker.spy(ops_module, "_write_positions")
    key = torch.randn(3, 1, 4, generator=gen)
    step = torch.tensor([1, -1, 6])
    for _ in range(3):  # three layers of one step share the slot mapping object
        kc, vc = torch.zeros(2, 4, 1, 4), torch.zeros(2, 4, 1, 4)
        ops.write_kv_cache(key, key, kc, vc, step)
    assert spy.call_count == 1
    assert torch.equal(kc[0, 1], key[0]) and torch.equal(kc[1, 2], key[2])
    kc, vc = torch.zeros(2, 4, 1, 4), torch.zeros(2, 4, 1, 4)
    next_step = torch.tensor([1, -1, 6])  # equal contents, another step's object
    ops.write_kv_cache(key, key, kc, vc, next_step)
    assert spy.call_count == 2
    kc = torch.zeros(4, 2, 1, 4)
    ops.write_kv_cache(key, key, kc, torch.zeros(4, 2, 1, 4), next_step)
    assert spy.call_count == 3  # another block size: other positions for the same slots
    assert torch.equal(kc[0, 1], key[0]) and torch.equal(kc[3, 0], key[2])


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_reference_alone_computes_every_kind_of_step(dtype: torch.dtype) -> None:
    # ReferenceOps: plain torch, no native kernel (the golden reference of the NPU's ops).
    ops = ReferenceOps()
    _check_attention([1, 1, 1, 1], [1, 5, 13, 8], dtype=dtype, ops=ops)
    _check_attention([1, 4, 1, 7, 1], [9, 4, 2, 12, 17], dtype=dtype, ops=ops, pad_tokens=2)
    _check_attention([5, 9, 3], [5, 9, 3], dtype=dtype, ops=ops)
