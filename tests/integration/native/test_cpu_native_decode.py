"""The native host attention kernel against CpuOps' torch path (its reference semantics):
decodes a row a sequence, prefills a row a new token.

The kernel computes in float32 and rounds once at the output, in bf16 too: the NPU
attention op's contract (the emulated-NPU generate test pins the host's ids to it), and
the torch path's, which attends on float32 copies of the gathered K/V.

Tolerances: both sides compute float32 scores, softmax and sums, but in different
summation orders (16-lane dot products here, oneDNN GEMMs in torch's flash kernel) and
with different float32 exp approximations. In float32 that is a few ulps of an O(1)
output: 2e-6. In bf16 a float32 difference that crosses a rounding boundary moves an
output by one bf16 step, 2**-8 relative: atol/rtol 2**-7 leave one step of slack on
top of that one. Such crossings are rare: at least 99% of the bf16 outputs are the
reference's bits.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from adapters.cpu import native
from adapters.cpu.ops import CpuOps
from adapters.torch.attention_plan import build_attention_plan
from ports.ops import AttentionPlan
from support.native_kernels import built_or_skip

TOL = {
    torch.float32: {"atol": 2e-6, "rtol": 2e-6},
    torch.bfloat16: {"atol": 2**-7, "rtol": 2**-7},
}
DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(scope="module")
def kernel() -> native.DecodeKernel:
    return built_or_skip(native.decode_attention(), "decode kernel", "the torch path")


def _batch(
    seq_lens: list[int],
    hq: int,
    hk: int,
    d: int,
    block_size: int,
    dtype: torch.dtype,
    seed: int,
    pad_tokens: int = 0,
    planes: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, AttentionPlan]:
    """One new token per sequence; shuffled blocks; NaN in every cache row never written.

    planes: K and V are the two planes of one [blocks, 2, block_size, Hk, D] allocation
    (strided views), as the host runner's cache is laid out.
    """
    gen = torch.Generator().manual_seed(seed)
    per_seq = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(per_seq) + 2
    perm = torch.randperm(num_blocks, generator=gen)
    storage = torch.full((num_blocks, 2, block_size, hk, d), float("nan"))
    table = torch.zeros(len(seq_lens), max(per_seq), dtype=torch.int32)
    used = 0
    for i, (n, blocks) in enumerate(zip(seq_lens, per_seq, strict=True)):
        ids = perm[used : used + blocks]
        used += blocks
        table[i, :blocks] = ids
        for pos in range(n):
            storage[ids[pos // block_size], :, pos % block_size] = torch.randn(
                2, hk, d, generator=gen
            )
    storage = storage.to(dtype)
    if planes:
        kc, vc = storage[:, 0], storage[:, 1]
    else:
        kc, vc = storage[:, 0].contiguous(), storage[:, 1].contiguous()
    b = len(seq_lens)
    query = torch.randn(b + pad_tokens, hq, d, generator=gen).to(dtype)
    meta = build_attention_plan(
        torch.arange(b + 1, dtype=torch.int32),
        torch.tensor(seq_lens, dtype=torch.int32),
        table,
        needs=CpuOps.plan_needs,
    )
    return query, kc, vc, meta


def _both(
    query: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, meta: AttentionPlan
) -> tuple[torch.Tensor, torch.Tensor]:
    """CpuOps' result with the kernel, and the torch path's on float32 copies, rounded once."""
    scale = 1 / math.sqrt(query.shape[-1])
    sentinel = 7.0
    native_out = torch.full_like(query, sentinel)
    exact = torch.full_like(query, sentinel, dtype=torch.float32)
    CpuOps(native_attention=True).paged_attention(query, kc, vc, meta, scale, native_out)
    CpuOps(native_attention=False).paged_attention(
        query.float(), kc.float(), vc.float(), meta, scale, exact
    )
    n = meta.num_actual_tokens
    assert bool((native_out[n:] == sentinel).all())  # padding rows untouched
    return native_out[:n], exact[:n].to(query.dtype)


def _close(actual: torch.Tensor, expected: torch.Tensor, same_bits: float = 0.99) -> None:
    assert actual.dtype == expected.dtype
    assert bool(torch.isfinite(actual.float()).all())
    torch.testing.assert_close(actual.float(), expected.float(), **TOL[actual.dtype])
    if actual.dtype == torch.bfloat16:
        assert float((actual == expected).float().mean()) >= same_bits


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group", [1, 2, 3, 4, 6])
def test_native_decode_matches_torch_path_across_gqa_ratios(
    kernel: native.DecodeKernel, dtype: torch.dtype, group: int
) -> None:
    _close(*_both(*_batch([1, 7, 90, 95, 89, 33], 2 * group, 2, 64, 16, dtype, seed=group)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("head_size", "block_size"), [(64, 128), (128, 16), (32, 1), (32, 16), (80, 5), (48, 7)]
)
def test_native_decode_matches_torch_path_across_head_and_block_sizes(
    kernel: native.DecodeKernel, dtype: torch.dtype, head_size: int, block_size: int
) -> None:
    # 32, 64 and 128 take the compile-time head sizes; 48 and 80 the generic loop.
    _close(*_both(*_batch([3, 17, 40, 129], 12, 4, head_size, block_size, dtype, seed=head_size)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_native_decode_contexts_past_one_softmax_chunk(
    kernel: native.DecodeKernel, dtype: torch.dtype
) -> None:
    # 512 positions per online-softmax chunk, as torch's flash kernel splits the context.
    _close(*_both(*_batch([511, 512, 513, 1100, 60], 4, 2, 64, 128, dtype, seed=11)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_native_decode_on_cache_planes_with_padding_rows(
    kernel: native.DecodeKernel, dtype: torch.dtype
) -> None:
    _close(*_both(*_batch([5, 96, 89], 12, 4, 64, 128, dtype, seed=5, pad_tokens=3, planes=True)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_native_decode_in_a_mixed_batch(kernel: native.DecodeKernel, dtype: torch.dtype) -> None:
    # Decodes beside a chunked prefill, in one kernel call: each decode a row, each of
    # the prefill's new tokens a row with its own context length.
    query, kc, vc, meta = _batch([9, 40, 13, 70], 8, 2, 64, 16, dtype, seed=8)
    extra = torch.randn(3, 8, 64, generator=torch.Generator().manual_seed(9)).to(dtype)
    mixed = build_attention_plan(
        torch.tensor([0, 1, 4, 5, 6], dtype=torch.int32),  # seq 1: 3 tokens
        meta.seq_lens,
        meta.block_table,
        needs=CpuOps.plan_needs,
    )
    q6 = torch.cat([query[:1], extra, query[2:]])
    _close(*_both(q6, kc, vc, mixed))


def _prefill_step(
    q_lens: list[int], seq_lens: list[int], dtype: torch.dtype, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, AttentionPlan]:
    """A step of prefills: q_lens new tokens after seq_len - q_len cached ones each."""
    _, kc, vc, meta = _batch(seq_lens, 12, 4, 64, 16, dtype, seed=seed)
    starts = [0]
    for n in q_lens:
        starts.append(starts[-1] + n)
    gen = torch.Generator().manual_seed(seed + 1)
    step = build_attention_plan(
        torch.tensor(starts, dtype=torch.int32),
        meta.seq_lens,
        meta.block_table,
        needs=CpuOps.plan_needs,
    )
    return torch.randn(starts[-1] + 2, 12, 64, generator=gen).to(dtype), kc, vc, step


# Fresh prompts of equal and of ragged lengths, chunks after cached context, and a
# prefill beside decodes: every new token a row of the kernel.
PREFILLS = [
    ([64] * 4, [64] * 4),
    ([5, 33, 17], [5, 33, 17]),
    ([7, 20], [40, 20]),
    ([1, 9, 1, 30], [61, 9, 14, 30]),
]


@pytest.mark.parametrize(
    ("q_lens", "seq_lens"), PREFILLS, ids=["equal", "ragged", "chunked", "mixed"]
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_native_prefill_matches_the_torch_path(
    kernel: native.DecodeKernel, q_lens: list[int], seq_lens: list[int], dtype: torch.dtype
) -> None:
    _close(*_both(*_prefill_step(q_lens, seq_lens, dtype, seed=len(q_lens))))


def test_a_token_of_a_prefill_gets_the_bits_of_the_same_token_decoded(
    kernel: native.DecodeKernel,
) -> None:
    # Token i of a prompt sees positions 0..i: as a decode of a sequence of length i + 1.
    query, kc, vc, step = _prefill_step([24], [24], torch.float32, seed=2)
    out = torch.empty_like(query)
    CpuOps().paged_attention(query, kc, vc, step, 0.125, out)
    for i in (0, 11, 23):
        one = build_attention_plan(
            torch.tensor([0, 1], dtype=torch.int32),
            torch.tensor([i + 1], dtype=torch.int32),
            step.block_table,
            needs=CpuOps.plan_needs,
        )
        alone = torch.empty(1, 12, 64)
        CpuOps().paged_attention(query[i : i + 1], kc, vc, one, 0.125, alone)
        assert torch.equal(alone[0], out[i])


def test_a_prefill_past_the_native_limit_takes_sdpa(
    kernel: native.DecodeKernel, mocker  # type: ignore[no-untyped-def]
) -> None:
    ops = CpuOps(native_max_query=16)
    spy = mocker.spy(ops, "_prefill")
    for longest, sdpa_calls in ((16, 0), (17, 1)):  # at the limit: the kernel; past it: SDPA
        step = _prefill_step([longest, 9], [longest, 30], torch.float32, seed=3)
        ops.paged_attention(*step, 0.125, torch.empty_like(step[0]))
        assert spy.call_count == sdpa_calls
        _close(*_both(*step))


def test_native_decode_bf16_equals_the_torch_path_in_bf16(kernel: native.DecodeKernel) -> None:
    # The torch path given the bf16 tensors themselves (its float32 copies inside).
    query, kc, vc, meta = _batch([90, 95, 89, 96, 600] * 3, 12, 4, 64, 128, torch.bfloat16, 3)
    native_out, exact = _both(query, kc, vc, meta)
    torch_out = torch.empty_like(query)
    CpuOps(native_attention=False).paged_attention(query, kc, vc, meta, 0.125, torch_out)
    assert torch.equal(torch_out, exact)
    _close(native_out, torch_out)


def test_native_decode_runs_on_two_threads(kernel: native.DecodeKernel) -> None:
    query, kc, vc, meta = _batch([90, 95, 89, 96] * 4, 12, 4, 64, 128, torch.bfloat16, seed=4)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _both(query, kc, vc, meta)[0]
        torch.set_num_threads(2)
        two = _both(query, kc, vc, meta)[0]
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)  # pairs are independent: threads change no bits


def test_unsupported_dtypes_keep_the_torch_path(kernel: native.DecodeKernel) -> None:
    query, kc, vc, _ = _batch([5, 9], 4, 2, 16, 4, torch.float16, seed=6)
    ops = CpuOps(native_attention=True)
    assert ops._native_kernel(query, (kc, vc)) is None
    assert ops._native_kernel(query.float(), (kc.float(), vc.float())) is kernel


def test_a_failed_build_is_logged_once_and_the_torch_path_serves(caplog) -> None:  # type: ignore[no-untyped-def]
    def fail(**_: object) -> None:
        raise RuntimeError("Error building extension 'vllm_ascend_host_attention'\nno compiler")

    attention = {"attention": native.EXTENSIONS["attention"]}
    kernels = native.NativeKernels(Path(native.__file__).parent, attention, load_library=fail)
    with caplog.at_level("INFO", logger="vllm.plugins.ascend"):
        assert kernels.load("attention") is False
        assert kernels.load("attention") is False
    notes = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(notes) == 1 and "no compiler" in notes[0]
    assert "attention (decode_attention)" in notes[0] and "torch's SDPA" in notes[0]
    query, kc, vc, meta = _batch([5, 9], 4, 2, 16, 4, torch.bfloat16, seed=7)
    scale = 1 / math.sqrt(query.shape[-1])
    out = torch.empty_like(query)
    exact = torch.empty_like(query, dtype=torch.float32)
    torch_path = CpuOps(native_attention=False)
    torch_path.paged_attention(query, kc, vc, meta, scale, out)
    CpuOps(native_attention=False).paged_attention(
        query.float(), kc.float(), vc.float(), meta, scale, exact
    )
    n = meta.num_actual_tokens
    assert torch.equal(out[:n], exact[:n].to(query.dtype))


def test_the_build_is_named_after_the_cpus_instruction_set() -> None:
    """-march=native: a build for one CPU kind must not be loaded on another."""
    from adapters.cpu.native import _cpu_key

    zen = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512f\n"
    older = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2\n"
    two_cores = zen + zen.replace(": 0", ": 1")
    assert _cpu_key(zen) != _cpu_key(older)
    assert _cpu_key(zen) == _cpu_key(two_cores)  # per CPU kind, not per core
    assert len(_cpu_key()) == 12
