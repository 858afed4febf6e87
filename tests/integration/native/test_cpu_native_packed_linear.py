"""The native host GEMM, by the rows of x: at one or two the small GEMM over the dense
weight, at 3 to 64 the panel GEMM over the weight's panels (both against a float64
reference, each row's bits independent of its batch), past those torch's own oneDNN calls
(the same bits); bf16 on AMX tiles (K a multiple of 32): the panels from 1 to 32 rows,
oneDNN past them, oneDNN's bits at every row count; one pack per weight, a repack after an
in-place change; symbolic shapes under torch.compile."""

from __future__ import annotations

import gc
from typing import Any

import pytest
import torch

from adapters.cpu import native
from support.native_kernels import built_or_skip

F = torch.nn.functional

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN"
)


@pytest.fixture(scope="module")
def op() -> Any:
    return built_or_skip(native.packed_linear(), "GEMM", "packing in Python")


def _dtypes() -> list[torch.dtype]:
    bf16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return [torch.float32, torch.bfloat16] if bf16 else [torch.float32]


def _torch_path(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    packed = torch.ops.mkldnn._reorder_linear_weight(weight)
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def _cache_size() -> int:
    return int(torch.ops.ascend_host_native.packed_linear_cache_size())


def _small_gemm_here(dtype: torch.dtype = torch.float32) -> bool:
    """Whether this CPU's build has the small GEMM for `dtype` (AVX-512; bf16: and BF16)."""
    x, w = torch.randn(1, 32).to(dtype), torch.randn(8, 32).to(dtype)
    try:
        torch.ops.ascend_host_native.small_gemm(x, w, None)
    except RuntimeError:
        return False
    return True


def _panels_here(dtype: torch.dtype = torch.float32) -> bool:
    """Whether this CPU's build has the panel GEMM for `dtype` (AVX-512; bf16: and BF16)."""
    try:
        panels = torch.ops.ascend_host_native.pack_panels(torch.randn(8, 32).to(dtype))
        torch.ops.ascend_host_native.panel_gemm(torch.randn(3, 32).to(dtype), panels, 8, None)
    except RuntimeError:
        return False
    return True


def _panel_rows(dtype: torch.dtype, k: int) -> tuple[int, int]:
    """The rows of x the op sends to the panel GEMM at K = k: 3 to 64, bf16 on AMX tiles 1 to 32."""
    first, last = torch.ops.ascend_host_native.panel_gemm_rows(dtype, k)
    return first, last


def _onednn_rows(dtype: torch.dtype) -> list[tuple[int, ...]]:
    """Row counts the op sends to oneDNN: past 64 with the panel GEMM, past two without."""
    if _panels_here(dtype):
        return [(65,), (5, 17), (300,)]
    return [(3,), (16,), (2, 5)]


@pytest.mark.parametrize("dtype", _dtypes())
@pytest.mark.parametrize("with_bias", [False, True])
def test_past_the_native_kernels_the_same_bits_as_torchs_packed_linear(
    op: Any, dtype: torch.dtype, with_bias: bool
) -> None:
    for rows in _onednn_rows(dtype):
        gen = torch.Generator().manual_seed(len(rows) * 7 + rows[0])
        weight = (torch.randn(96, 64, generator=gen) * 0.05).to(dtype)
        bias = torch.randn(96, generator=gen).to(dtype) if with_bias else None
        x = torch.randn(*rows, 64, generator=gen).to(dtype)
        got = op(x, weight, bias)
        assert got.shape == (*rows, 96) and got.dtype == dtype
        assert torch.equal(got, _torch_path(x, weight, bias)), rows
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(got, F.linear(x, weight, bias), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", _dtypes())
@pytest.mark.parametrize("rows", [(3,), (8,), (9,), (16,), (2, 5), (64,)])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("shape", [(96, 64), (37, 70), (8, 256), (300, 768), (40, 33)])
def test_at_3_to_64_rows_the_op_takes_the_panel_gemm(
    op: Any, dtype: torch.dtype, rows: tuple[int, ...], with_bias: bool, shape: tuple[int, int]
) -> None:
    """The panel GEMM: float32 sums within rounding of a float64 reference (bf16: one
    rounding, at most a bf16 step off), output columns past the last full panel, K of any
    length (odd: bf16's last pair half empty), and what the op returns at these rows."""
    if not _panels_here(dtype):
        pytest.skip("no panel GEMM for this dtype on this CPU: these rows go to oneDNN")
    n, k = shape
    gen = torch.Generator().manual_seed(n + k + rows[0])
    weight = (torch.randn(n, k, generator=gen) * 0.05).to(dtype)
    bias = torch.randn(n, generator=gen).to(dtype) if with_bias else None
    x = torch.randn(*rows, k, generator=gen).to(dtype)
    got = op(x, weight, bias)
    assert got.shape == (*rows, n) and got.dtype == dtype
    panels = native.pack_linear_weight()(weight)
    per_step = 2 if dtype == torch.bfloat16 else 1  # the op's pack is the weight's panels
    assert panels.shape == ((n + 15) // 16, (k + per_step - 1) // per_step, 16 * per_step)
    direct = torch.ops.ascend_host_native.panel_gemm(x.reshape(-1, k), panels, n, bias)
    if x.numel() // k <= _panel_rows(dtype, k)[1]:
        assert torch.equal(got.reshape(-1, n), direct)
    else:  # bf16 on AMX tiles past 32 rows: oneDNN's own K blocks
        assert torch.equal(got, _torch_path(x, weight, bias))
    exact = x.double() @ weight.double().t() + (0 if bias is None else bias.double())
    if dtype == torch.float32:
        torch.testing.assert_close(got.double(), exact, atol=1e-5, rtol=1e-5)
    else:
        step = exact.abs().clamp_min(1e-30) * 2.0**-7
        assert bool(((got.double() - exact).abs() <= step).all())


def _onednn_blocks_k_as_measured() -> bool:
    """AVX-512 without AMX: the kernels oneDNN's linear runs on this project's host, whose
    K blocks the panel GEMM follows (panel_gemm.cpp, k_block)."""
    amx = torch.cpu._is_amx_tile_supported()
    return torch.backends.cpu.get_cpu_capability() == "AVX512" and not amx


@pytest.mark.parametrize("dtype", _dtypes())
def test_the_panel_gemm_gives_onednns_bits_where_it_blocks_k_the_same(
    op: Any, dtype: torch.dtype
) -> None:
    """The panel GEMM sums in oneDNN's order on its host's kernels (one chain up to K 512,
    blocks of 512 up to 1024, of 1024 past it): the host's numbers at 3 to 64 rows are the
    ones oneDNN gave there, so the NPU path's linears (oneDNN's, on the emulator) match."""
    if not _panels_here(dtype):
        pytest.skip("no panel GEMM for this dtype on this CPU")
    if not _onednn_blocks_k_as_measured():
        pytest.skip("oneDNN's kernels on this CPU (AMX, or no AVX-512) block K their own way")
    gen = torch.Generator().manual_seed(2)
    for k in (64, 71, 256, 512, 513, 768, 1024, 1025, 2048, 4096):
        for rows, n in ((3, 384), (16, 1024), (64, 40), (9, 8)):
            weight = (torch.randn(n, k, generator=gen) * 0.05).to(dtype)
            bias = torch.randn(n, generator=gen).to(dtype)
            x = torch.randn(rows, k, generator=gen).to(dtype)
            assert torch.equal(op(x, weight, bias), _torch_path(x, weight, bias)), (rows, n, k)


def test_the_panels_hold_the_weight_by_output_column_with_zeros_past_it() -> None:
    if not _panels_here():
        pytest.skip("no panel GEMM on this CPU")
    weight = torch.arange(20 * 3, dtype=torch.float32).reshape(20, 3)
    panels = torch.ops.ascend_host_native.pack_panels(weight)
    assert panels.shape == (2, 3, 16)
    for n in range(20):
        assert torch.equal(panels[n // 16, :, n % 16], weight[n])
    assert not panels[1, :, 4:].any()
    if _panels_here(torch.bfloat16):  # pairs of k per column, the odd K's last half zero
        pairs = torch.ops.ascend_host_native.pack_panels(weight.bfloat16()).view(2, 2, 16, 2)
        for n in range(20):
            assert torch.equal(pairs[n // 16, :, n % 16].reshape(-1)[:3], weight[n].bfloat16())
            assert pairs[n // 16, 1, n % 16, 1] == 0
        assert not pairs[1, :, 4:].any()
    strided = torch.randn(3, 20).t()  # any strides: the pack is a copy
    assert torch.equal(torch.ops.ascend_host_native.pack_panels(strided)[0, :, 5], strided[5])


@pytest.mark.skipif(
    not torch.cpu._is_amx_tile_supported(), reason="this CPU has no AMX: bf16 keeps VDPBF16PS"
)
def test_on_a_cpu_with_amx_bf16_panels_of_whole_tiles_take_them(op: Any) -> None:
    """K a multiple of 32: the AMX tiles (one chain over K, not the K blocks), within a bf16
    step of the exact product; other K keep the AVX-512 kernel."""
    takes = torch.ops.ascend_host_native.panel_gemm_amx_takes
    assert takes(256) and takes(2048) and not takes(70) and not takes(33)
    gen = torch.Generator().manual_seed(4)
    weight = (torch.randn(40, 1024 + 64, generator=gen) * 0.05).bfloat16()
    bias = torch.randn(40, generator=gen).bfloat16()
    for rows in (3, 17, 33, 64):  # row blocks of 16, the last padded or whole
        x = torch.randn(rows, 1024 + 64, generator=gen).bfloat16()
        exact = x.double() @ weight.double().t() + bias.double()
        step = exact.abs().clamp_min(1e-30) * 2.0**-7
        assert bool(((op(x, weight, bias).double() - exact).abs() <= step).all()), rows


@pytest.mark.parametrize("dtype", _dtypes())
def test_the_panel_gemm_gives_each_row_the_same_bits_at_any_batch_it_serves(
    op: Any, dtype: torch.dtype
) -> None:
    """A sequence's numbers do not depend on the decode batch it shares, across the panel
    GEMM's rows (3 to 64; bf16 on AMX tiles 1 to 32): each output is the same multiply-add
    chains over K's blocks, whatever tile it falls in."""
    if not _panels_here(dtype):
        pytest.skip("no panel GEMM for this dtype on this CPU")
    first, last = _panel_rows(dtype, 768)
    gen = torch.Generator().manual_seed(11)
    weight = (torch.randn(300, 768, generator=gen) * 0.05).to(dtype)
    x = torch.randn(last, 768, generator=gen).to(dtype)
    full = op(x, weight, None)
    spans = [(0, 3), (5, 8), (7, 9), (20, 16), (1, last - 1), (last - first, first)]
    for start, size in spans:
        part = op(x[start : start + size], weight, None)
        assert torch.equal(part, full[start : start + size]), (start, size)


@pytest.mark.skipif(
    not torch.cpu._is_amx_tile_supported(), reason="this CPU has no AMX: oneDNN keeps VDPBF16PS"
)
def test_on_a_cpu_with_amx_bf16_gives_onednns_bits_at_every_row_count(op: Any) -> None:
    """K a multiple of 32: oneDNN's bits from 1 row to past 64 (the tiles' one chain over K
    to 32 rows, oneDNN itself past them), so the NPU path's linears on the emulator (oneDNN's)
    give the host's numbers; K of other lengths keeps the AVX-512 kernels' own order."""
    gen = torch.Generator().manual_seed(6)
    for k, n in ((64, 4096), (128, 6144), (512, 4096), (768, 576), (768, 1000), (4096, 768)):
        assert _panel_rows(torch.bfloat16, k) == (1, 32)
        weight = (torch.randn(n, k, generator=gen) * 0.05).bfloat16()
        bias = torch.randn(n, generator=gen).bfloat16()
        for rows in (1, 2, 3, 16, 17, 32, 33, 48, 64, 65):
            x = torch.randn(rows, k, generator=gen).bfloat16()
            assert torch.equal(op(x, weight, bias), _torch_path(x, weight, bias)), (k, n, rows)
    assert _panel_rows(torch.bfloat16, 70) == (3, 64)


def test_the_panel_gemm_refuses_inputs_it_does_not_take(op: Any) -> None:
    """Two or 65 rows, panels of another weight, a bias of another dtype: an error naming
    the kernel, never a wrong sum; the op itself serves them (small GEMM, oneDNN)."""
    if not _panels_here():
        pytest.skip("no panel GEMM on this CPU")
    gemm = torch.ops.ascend_host_native.panel_gemm
    weight = torch.randn(40, 32)
    panels = torch.ops.ascend_host_native.pack_panels(weight)
    for x, n, bias in (
        (torch.randn(2, 32), 40, None),
        (torch.randn(65, 32), 40, None),
        (torch.randn(4, 32), 60, None),  # 4 panels would hold 60 columns, not 3
        (torch.randn(4, 31), 40, None),
        (torch.randn(4, 32), 40, torch.randn(40, dtype=torch.float64)),
        (torch.randn(4, 32).bfloat16(), 40, None),  # float32 panels
    ):
        with pytest.raises(RuntimeError, match="panel_gemm"):
            gemm(x, panels, n, bias)
    for rows in (2, 65):
        x = torch.randn(rows, 32)
        torch.testing.assert_close(op(x, weight, None), F.linear(x, weight), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", _dtypes())
def test_a_weight_that_is_not_contiguous_keeps_onednns_pack(op: Any, dtype: torch.dtype) -> None:
    strided = torch.randn(32, 48).to(dtype).t()
    x = torch.randn(5, 32).to(dtype)
    assert native.pack_linear_weight()(strided).is_mkldnn
    assert torch.equal(op(x, strided, None), _torch_path(x, strided, None))


@pytest.mark.parametrize("dtype", _dtypes())
@pytest.mark.parametrize("rows", [(1,), (2,), (1, 1), (2, 1)])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("k", [64, 40, 70, 768])
def test_one_or_two_rows_take_the_small_gemm_or_on_amx_the_tiles(
    op: Any, dtype: torch.dtype, rows: tuple[int, ...], with_bias: bool, k: int
) -> None:
    """The small GEMM: float32 sums over the dense weight, within rounding of a float64
    reference (K with and without a tail chunk), and what the op returns for 1-2 rows but
    where bf16 takes AMX tiles (K a multiple of 32): the panel GEMM's there."""
    if not _small_gemm_here(dtype):
        pytest.skip("no small GEMM for this dtype on this CPU: every row count goes to oneDNN")
    gen = torch.Generator().manual_seed(k + len(rows))
    weight = (torch.randn(37, k, generator=gen) * 0.05).to(dtype)
    bias = torch.randn(37, generator=gen).to(dtype) if with_bias else None
    x = torch.randn(*rows, k, generator=gen).to(dtype)
    got = op(x, weight, bias)
    assert got.shape == (*rows, 37) and got.dtype == dtype
    x2d = x.reshape(-1, k)
    small = torch.ops.ascend_host_native.small_gemm
    if x2d.shape[0] < _panel_rows(dtype, k)[0]:
        assert torch.equal(got.reshape(-1, 37), small(x2d, weight, bias))
    else:
        panels = native.pack_linear_weight()(weight)
        direct = torch.ops.ascend_host_native.panel_gemm(x2d, panels, 37, bias)
        assert torch.equal(got.reshape(-1, 37), direct)
    exact = x.double() @ weight.double().t() + (0 if bias is None else bias.double())
    if dtype == torch.float32:
        torch.testing.assert_close(got.double(), exact, atol=1e-5, rtol=1e-5)
    else:  # float32 sums, one rounding to bf16: at most one bf16 step off the exact value
        step = exact.abs().clamp_min(1e-30) * 2.0**-7
        assert bool(((got.double() - exact).abs() <= step).all())


@pytest.mark.parametrize("dtype", _dtypes())
def test_the_small_gemm_gives_each_row_the_same_bits_at_one_or_two_rows(
    op: Any, dtype: torch.dtype
) -> None:
    """A sequence's numbers do not depend on whether its decode step was batched with
    another: the summation order is the same at one and at two rows (bf16 on AMX tiles:
    the panel GEMM's one chain, the same too)."""
    if not _small_gemm_here(dtype):
        pytest.skip("no small GEMM for this dtype on this CPU: every row count goes to oneDNN")
    gen = torch.Generator().manual_seed(5)
    weight = (torch.randn(300, 768, generator=gen) * 0.05).to(dtype)
    x = torch.randn(2, 768, generator=gen).to(dtype)
    pair = op(x, weight, None)
    assert torch.equal(pair[0], op(x[:1], weight, None)[0])
    assert torch.equal(pair[1], op(x[1:], weight, None)[0])


@pytest.mark.parametrize("dtype", _dtypes())
@pytest.mark.parametrize("k", [70, 768])
@pytest.mark.parametrize("m", [1, 2])
def test_the_small_gemms_weight_streams_give_each_output_one_rows_bits(
    dtype: torch.dtype, k: int, m: int
) -> None:
    """Each thread walks its weight rows as several streams side by side; an output's sum
    is still its row's own (one weight row alone takes the one-stream path): the bits do
    not depend on which stream, nor how many rows, a layer has."""
    if not _small_gemm_here(dtype):
        pytest.skip("no small GEMM for this dtype on this CPU: every row count goes to oneDNN")
    gen = torch.Generator().manual_seed(k + m)
    weight = (torch.randn(301, k, generator=gen) * 0.05).to(dtype)
    bias = torch.randn(301, generator=gen).to(dtype)
    x = torch.randn(m, k, generator=gen).to(dtype)
    small = torch.ops.ascend_host_native.small_gemm
    whole = small(x, weight, bias)
    alone = torch.cat([small(x, weight[n : n + 1], bias[n : n + 1]) for n in range(301)], dim=1)
    assert torch.equal(whole, alone)


def test_the_small_gemm_refuses_inputs_it_does_not_take(op: Any) -> None:
    """Three rows, a packed or non-contiguous weight: an error naming it, never a wrong sum."""
    if not _small_gemm_here():
        pytest.skip("this CPU lacks AVX-512: no small GEMM")
    small = torch.ops.ascend_host_native.small_gemm
    weight = torch.randn(16, 32)
    with pytest.raises(RuntimeError, match="small_gemm"):
        small(torch.randn(3, 32), weight, None)
    with pytest.raises(RuntimeError, match="small_gemm"):
        small(torch.randn(1, 32), torch.randn(32, 16).t(), None)
    # the op itself takes them all, through oneDNN
    x = torch.randn(1, 32)
    strided = torch.randn(32, 16).t()
    torch.testing.assert_close(op(x, strided, None), F.linear(x, strided), atol=1e-5, rtol=1e-5)


def test_one_pack_per_weight_and_a_new_one_after_an_in_place_change(op: Any) -> None:
    pack = native.pack_linear_weight()
    assert pack is not None
    weight = torch.randn(32, 16)
    x = torch.randn(3, 16)
    first = pack(weight)
    assert pack(weight) is first  # cached: the same tensor
    size = _cache_size()
    op(x, weight, None)
    assert _cache_size() == size  # the op read the pack made above
    weight.mul_(2)  # an in-place reload bumps the version counter
    assert pack(weight) is not first
    torch.testing.assert_close(op(x, weight, None), F.linear(x, weight), atol=1e-5, rtol=1e-5)
    assert _cache_size() == size  # replaced, not added


def test_a_dropped_weights_pack_goes_when_the_next_is_stored(op: Any) -> None:
    weight = torch.randn(32, 16)
    op(torch.randn(3, 16), weight, None)  # three rows: oneDNN, over the pack
    size = _cache_size()
    del weight
    gc.collect()
    op(torch.randn(3, 16), torch.randn(24, 16), None)  # a new weight: dead entries dropped
    assert _cache_size() == size


def test_an_inference_tensor_is_packed_per_call_not_cached(op: Any) -> None:
    with torch.inference_mode():
        weight = torch.randn(32, 16)
        x = torch.randn(4, 16)
        size = _cache_size()
        torch.testing.assert_close(op(x, weight, None), F.linear(x, weight), atol=1e-5, rtol=1e-5)
        assert _cache_size() == size


def test_under_torch_compile_the_batch_dimension_stays_symbolic(op: Any) -> None:
    """The meta kernel reads symbolic sizes: one graph serves every batch size."""
    from torch._dynamo.testing import CompileCounterWithBackend

    weight = torch.randn(48, 32)
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(lambda a: op(a, weight, None) * 2, backend=counter, dynamic=True)
    for batch in (3, 5, 2, 9):  # 2: the small GEMM, in the same graph
        x = torch.randn(batch, 32)
        assert torch.equal(compiled(x), op(x, weight, None) * 2)
    assert counter.frame_count == 1
    assert "ascend_host_native.packed_linear" in counter.graphs[0].code
