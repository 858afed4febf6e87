"""Golden tests: NpuOps on the emulated torch_npu against the host adapter's CpuOps.

The emulator computes each NPU op from its documented formula, independently of
CpuOps, after binding the call to the op's 2.14.0 schema; so these check the
adapter's argument choices and layout conversions (BSH padding, block tables,
cos/sin spreading, index pairs), not the NPU kernels themselves.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pytest
import torch

from adapters.cpu.ops import CpuOps
from adapters.npu.ops import NpuOps
from adapters.torch.attention_plan import build_attention_plan
from ascend_core.errors import ConfigError
from ports.ops import AttentionPlan
from support.torch_npu_emulator import make_torch_npu


def host() -> CpuOps:
    """The host's torch path, the reference (no native kernels: no compiler in tests/unit)."""
    return CpuOps(native_attention=False, native_write=False)


HALF_TOL = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: 1e-5}


@pytest.fixture
def tnpu():
    return make_torch_npu()


@pytest.fixture
def npu_ops(tnpu):
    return NpuOps(tnpu)


def close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    tol = HALF_TOL[dtype]
    torch.testing.assert_close(actual.float(), expected.float(), atol=tol, rtol=tol)


def same_bits(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Ops whose host twin keeps the NPU op's precision contract (float32 inside, one
    rounding at the output) and the same order of float32 operations."""
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual, expected, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rms_norm(npu_ops, tnpu, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 64, generator=g).to(dtype)
    w = (torch.rand(64, generator=g) + 0.5).to(dtype)
    same_bits(npu_ops.rms_norm(x, w, 1e-5), host().rms_norm(x, w, 1e-5))
    assert tnpu.calls_of("npu_rms_norm")[0]["epsilon"] == 1e-5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_add_rms_norm(npu_ops, dtype):
    g = torch.Generator().manual_seed(1)
    x, r = (torch.randn(5, 32, generator=g).to(dtype) for _ in range(2))
    w = torch.rand(32, generator=g).to(dtype)
    y, s = npu_ops.add_rms_norm(x, r, w, 1e-6)
    y_ref, s_ref = host().add_rms_norm(x, r, w, 1e-6)
    same_bits(y, y_ref)
    assert torch.equal(s, s_ref)


def test_weight_of_another_dtype_is_cast_as_the_op_requires(npu_ops):
    x = torch.randn(3, 16, dtype=torch.bfloat16)
    w = torch.rand(16, dtype=torch.float32)
    same_bits(npu_ops.rms_norm(x, w, 1e-6), host().rms_norm(x, w, 1e-6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_and_mul(npu_ops, dtype):
    x = torch.randn(4, 3, 2 * 48, generator=torch.Generator().manual_seed(2)).to(dtype)
    same_bits(npu_ops.silu_and_mul(x), host().silu_and_mul(x))


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize(
    ("head_size", "rotary_dim", "hq", "hk", "dtype"),
    [
        (64, 64, 4, 4, torch.float32),
        (64, 32, 8, 2, torch.float32),  # partial rotary, GQA
        (128, 128, 4, 1, torch.bfloat16),
        (64, 32, 4, 2, torch.bfloat16),  # partial rotary at npu_mrope's bf16 minimum
        (40, 24, 2, 2, torch.float16),  # 24 is no multiple of 32: npu_rotary_mul
    ],
)
def test_rotary_embedding(npu_ops, tnpu, neox, head_size, rotary_dim, hq, hk, dtype):
    g = torch.Generator().manual_seed(3)
    tokens, max_pos = 9, 64
    positions = torch.randint(0, max_pos, (tokens,), generator=g)
    q = torch.randn(tokens, hq * head_size, generator=g).to(dtype)
    k = torch.randn(tokens, hk * head_size, generator=g).to(dtype)
    inv = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2).float() / rotary_dim))
    freqs = torch.outer(torch.arange(max_pos).float(), inv)
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype)
    args = (positions, q, k, cache, head_size, rotary_dim, neox)
    q_out, k_out = npu_ops.rotary_embedding(*args)
    q_ref, k_ref = host().rotary_embedding(*args)
    assert q_out.shape == q.shape and k_out.shape == k.shape
    close(q_out, q_ref, dtype)
    close(k_out, k_ref, dtype)
    # npu_mrope (q and k in one op) where rotary_dim fits it, else npu_rotary_mul per tensor.
    fused = rotary_dim % (16 if dtype == torch.float32 else 32) == 0
    used = "npu_mrope" if fused else "npu_rotary_mul"
    assert len(tnpu.calls_of(used)) == (1 if fused else 2)
    assert not tnpu.calls_of("npu_rotary_mul" if fused else "npu_mrope")
    modes = {c["rotary_mode"] for c in tnpu.calls_of(used)}
    assert modes == {"half" if neox else "interleave"}


def test_write_kv_cache_ignores_padding_rows(npu_ops, tnpu):
    g = torch.Generator().manual_seed(4)
    blocks, size, hk, d = 6, 16, 2, 8
    key, value = torch.randn(7, hk, d, generator=g), torch.randn(7, hk, d, generator=g)
    # Every slot is a cache slot (the backend cuts vLLM's -1 padding); rows 5, 6 pad.
    slots = torch.tensor([3, 40, 2, 95, 17])
    caches = [torch.zeros(blocks, size, hk, d) for _ in range(4)]
    npu_ops.write_kv_cache(key, value, caches[0], caches[1], slots)
    host().write_kv_cache(key, value, caches[2], caches[3], slots)
    assert torch.equal(caches[0], caches[2]) and torch.equal(caches[1], caches[3])
    # Contiguous caches: K and V in one launch.
    assert [c["cache_mode"] for c in tnpu.calls_of("npu_scatter_pa_kv_cache")] == ["Norm"]
    assert not tnpu.calls_of("npu_scatter_nd_update_")


def test_write_kv_cache_writes_through_a_strided_view(npu_ops, tnpu):
    kv = torch.zeros(4, 2, 16, 1, 4)  # [blocks, k/v, size, H, D]: each cache is a view
    key, value = torch.ones(2, 1, 4), torch.full((2, 1, 4), 2.0)
    npu_ops.write_kv_cache(key, value, kv[:, 0], kv[:, 1], torch.tensor([0, 33]))
    assert kv[0, 0, 0].eq(1).all() and kv[2, 1, 1].eq(2).all() and kv.sum() == 8 * 1 + 8 * 2
    # npu_scatter_pa_kv_cache takes contiguous caches only: the per-plane update serves.
    assert len(tnpu.calls_of("npu_scatter_nd_update_")) == 2
    assert not tnpu.calls_of("npu_scatter_pa_kv_cache")


def paged_batch(q_lens, seq_lens, hq, hk, d, block_size, dtype, seed=0, pad_tokens=0):
    """Random query and caches with shuffled block tables; tokens past the real ones pad."""
    g = torch.Generator().manual_seed(seed)
    per_seq = [math.ceil(s / block_size) for s in seq_lens]
    num_blocks = sum(per_seq) + 3
    order = torch.randperm(num_blocks, generator=g).tolist()
    width = max(per_seq)
    table = torch.zeros(len(seq_lens), width + 1, dtype=torch.int32)
    start = 0
    for i, n in enumerate(per_seq):
        table[i, :n] = torch.tensor(order[start : start + n], dtype=torch.int32)
        start += n
    tokens = sum(q_lens)
    query = torch.randn(tokens + pad_tokens, hq, d, generator=g).to(dtype)
    kc = torch.randn(num_blocks, block_size, hk, d, generator=g).to(dtype)
    vc = torch.randn(num_blocks, block_size, hk, d, generator=g).to(dtype)
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    meta = Plans(
        build_attention_plan(qsl, lens, table, needs=NpuOps.plan_needs),
        build_attention_plan(qsl, lens, table, needs=CpuOps.plan_needs),
    )
    return query, kc, vc, meta


class Plans(NamedTuple):
    """One step's plan as each device's ops read it."""

    npu: AttentionPlan
    host: AttentionPlan

    @property
    def num_actual_tokens(self) -> int:
        return self.npu.num_actual_tokens


CASES = {
    "prefill": ([5, 17, 1 + 128], [5, 17, 129]),
    "decode": ([1, 1, 1, 1], [1, 130, 77, 300]),
    "chunked_prefill_mixed": ([1, 40, 1, 3], [200, 300, 9, 131]),
    "prefix_cache_hit": ([7, 130], [135, 390]),
    "verify": ([3, 3, 3], [10, 130, 40]),  # a speculative verify step: 1 + 2 each
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize(("window", "with_sinks"), [(None, True), (40, False), (40, True)])
def test_paged_attention_with_a_window_and_sinks(npu_ops, tnpu, case, window, with_sinks):
    """gpt-oss's layers: a sliding window (band mode for prefills, a [B, KV_S] mask for
    decodes) and per-head sinks (the op's LSE, then sigmoid(lse - sink)), in bf16 against
    the host's float32 reference; the blocks wholly before every window are the null
    block, filled with NaN as unused cache memory may be."""
    q_lens, seq_lens = CASES[case]
    hq, hk, d, block_size, dtype = 8, 2, 32, 128, torch.bfloat16
    query, kc, vc, meta = paged_batch(q_lens, seq_lens, hq, hk, d, block_size, dtype, pad_tokens=2)
    sinks = torch.linspace(-2.0, 3.0, hq) if with_sinks else None
    if window is not None:
        null = kc.shape[0]  # one more block, all NaN, for the blocks behind each window
        kc = torch.cat((kc, torch.full_like(kc[:1], float("nan"))))
        vc = torch.cat((vc, torch.full_like(vc[:1], float("nan"))))
        for plan in meta:
            for i, (q_len, seq_len) in enumerate(zip(q_lens, seq_lens, strict=True)):
                behind = max(0, seq_len - q_len - window + 1) // block_size
                plan.block_table[i, :behind] = null
                for part in plan.parts:
                    hit = (part.seqs == i).nonzero()
                    if hit.numel():
                        part.block_table[int(hit[0, 0]), :behind] = null
    scale = d**-0.5
    out = torch.full_like(query, 7.0)
    ref = torch.full_like(query, 7.0)
    npu_ops.paged_attention(query, kc, vc, meta.npu, scale, out, window=window, sinks=sinks)
    host().paged_attention(query, kc, vc, meta.host, scale, ref, window=window, sinks=sinks)
    n = meta.num_actual_tokens
    assert not out[:n].isnan().any()
    close(out[:n], ref[:n], dtype)
    assert out[n:].eq(7.0).all()
    for c in tnpu.calls_of("npu_fused_infer_attention_score"):
        decode = c["query"].shape[1] == 1
        assert c["softmax_lse_flag"] == with_sinks
        if window is None:
            assert c["sparse_mode"] == (0 if decode else 3)
        elif decode:
            assert c["sparse_mode"] == 0 and c["atten_mask"].dtype == torch.bool
        else:
            assert (c["sparse_mode"], c["pre_tokens"], c["next_tokens"]) == (4, window - 1, 0)


@pytest.mark.parametrize("case", sorted(CASES))
# Head grouping and dtype are independent axes of the op: each value once, not the product.
@pytest.mark.parametrize(
    ("hq", "hk", "dtype"),
    [(4, 4, torch.float16), (8, 2, torch.bfloat16)],
    ids=["mha-fp16", "gqa-bf16"],
)
def test_paged_attention(npu_ops, tnpu, case, hq, hk, dtype):
    q_lens, seq_lens = CASES[case]
    d, block_size = 32, 128
    query, kc, vc, meta = paged_batch(q_lens, seq_lens, hq, hk, d, block_size, dtype, pad_tokens=2)
    scale = d**-0.5
    out = torch.full_like(query, 7.0)
    ref = torch.full_like(query, 7.0)
    npu_ops.paged_attention(query, kc, vc, meta.npu, scale, out)
    host().paged_attention(query, kc, vc, meta.host, scale, ref)
    n = meta.num_actual_tokens
    assert not out[:n].isnan().any()
    close(out[:n], ref[:n], dtype)
    assert out[n:].eq(7.0).all()  # padding rows untouched
    calls = tnpu.calls_of("npu_fused_infer_attention_score")
    assert {c["input_layout"] for c in calls} == {"BSH"}
    for c in calls:
        decode = c["query"].shape[1] == 1
        assert c["sparse_mode"] == (0 if decode else 3)
        assert (c["atten_mask"] is None) == decode
        assert c["num_heads"] == hq and c["num_key_value_heads"] == hk
        assert c["block_size"] == block_size


def test_the_plan_gives_the_op_its_host_lengths(npu_ops, tnpu):
    query, kc, vc, meta = paged_batch([3, 1, 0], [3, 5, 0], 2, 2, 16, 128, torch.float16)
    for _ in range(3):  # three layers, one plan
        npu_ops.paged_attention(query, kc, vc, meta.npu, 0.25, torch.empty_like(query))
    calls = tnpu.calls_of("npu_fused_infer_attention_score")
    # The decode part, then the prefill part; the empty sequence is in neither.
    lengths = [(c["actual_seq_lengths"], c["actual_seq_lengths_kv"]) for c in calls]
    assert lengths == [([1], [5]), ([3], [3])] * 3
    assert {c["block_table"].dtype for c in calls} == {torch.int32}


@pytest.mark.parametrize("case", ["decode", "verify"])
def test_a_uniform_step_goes_to_the_op_as_it_is(npu_ops, tnpu, case):
    """A decode or verify step's one part is the batch in order: the op takes the query
    rows as they are (no gather through a zero-padded copy), its rows go to the output as
    they are, and the result is the host's."""
    q_lens, seq_lens = CASES[case]
    query, kc, vc, meta = paged_batch(q_lens, seq_lens, 4, 2, 16, 128, torch.float16)
    (part,) = meta.npu.parts
    assert part.in_order
    out, ref = torch.empty_like(query), torch.empty_like(query)
    npu_ops.paged_attention(query, kc, vc, meta.npu, 0.25, out)
    host().paged_attention(query, kc, vc, meta.host, 0.25, ref)
    close(out, ref, torch.float16)
    (call,) = tnpu.calls_of("npu_fused_infer_attention_score")
    n, width = meta.num_actual_tokens, q_lens[0]
    assert torch.equal(call["query"], query[:n].reshape(n // width, width, -1))


def test_prefill_with_a_block_size_the_op_refuses_is_a_config_error(npu_ops):
    query, kc, vc, meta = paged_batch([4], [4], 2, 2, 16, 16, torch.float16)
    with pytest.raises(ConfigError, match="block_size 16") as err:
        npu_ops.paged_attention(query, kc, vc, meta.npu, 0.25, torch.empty_like(query))
    assert "--block-size 128" in err.value.hint


def test_decode_accepts_block_size_16(npu_ops):
    query, kc, vc, meta = paged_batch([1, 1], [20, 3], 2, 2, 16, 16, torch.float16)
    out, ref = torch.empty_like(query), torch.empty_like(query)
    npu_ops.paged_attention(query, kc, vc, meta.npu, 0.25, out)
    host().paged_attention(query, kc, vc, meta.host, 0.25, ref)
    close(out, ref, torch.float16)


def test_float32_query_is_refused_as_the_op_documents(npu_ops):
    query, kc, vc, meta = paged_batch([2], [2], 2, 2, 16, 128, torch.float32)
    with pytest.raises(ValueError, match="query dtype"):
        npu_ops.paged_attention(query, kc, vc, meta.npu, 0.25, torch.empty_like(query))


def test_interleaved_kv_caches_are_refused_with_the_layout_the_op_needs(npu_ops):
    query, kc, vc, meta = paged_batch([3], [3], 2, 2, 16, 128, torch.float16)
    kv = torch.cat((kc, vc), dim=-1)  # [blocks, size, Hk, 2D]: K|V side by side
    key_cache, value_cache = kv.split(16, dim=-1)
    with pytest.raises(ConfigError, match="contiguous") as err:
        npu_ops.paged_attention(
            query, key_cache, value_cache, meta.npu, 0.25, torch.empty_like(query)
        )
    assert "separate contiguous" in err.value.hint


@pytest.mark.parametrize("case", ["chunked_prefill_mixed", "decode"])
def test_block_compact_caches_are_read_as_doubled_pages(npu_ops, tnpu, case):
    """Hybrid models' layout: K and V alternate per block ([blocks, 2, size, Hk, D]), so
    the planes are strided; the op reads two contiguous views of the same memory, one
    offset by a page, with the block table doubled, and computes what the host does."""
    q_lens, seq_lens = CASES[case]
    query, kc, vc, meta = paged_batch(q_lens, seq_lens, 8, 2, 32, 128, torch.bfloat16)
    kv = torch.stack((kc, vc), dim=1)
    key_cache, value_cache = kv[:, 0], kv[:, 1]
    out, ref = torch.empty_like(query), torch.empty_like(query)
    npu_ops.paged_attention(query, key_cache, value_cache, meta.npu, 0.25, out)
    host().paged_attention(query, kc, vc, meta.host, 0.25, ref)
    close(out, ref, torch.bfloat16)
    for call in tnpu.calls_of("npu_fused_infer_attention_score"):
        assert call["key"].data_ptr() == kv.data_ptr()
        assert call["value"].data_ptr() == kv[0, 1].data_ptr()
        assert call["block_table"].eq(0).logical_or(call["block_table"] % 2 == 0).all()
