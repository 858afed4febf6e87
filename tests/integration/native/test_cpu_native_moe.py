"""The native host MoE ops: the experts against CpuMoeOps' three steps (permute,
grouped_mlp, unpermute): the same roundings, the GEMMs' sums in the kernel's own order;
plain top-k routing against the torch route, bit for bit."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from adapters.cpu import native
from adapters.cpu.moe import CpuMoeOps
from ports.moe import MoeOps, Routing, Scoring
from support.native_kernels import built_or_skip

OPS = CpuMoeOps()


@pytest.fixture(scope="module")
def kernel() -> native.MoeExpertsKernel:
    return built_or_skip(native.moe_experts(), "MoE experts", "the per-expert matmul loop")


def _layer(
    tokens: int, hidden: int, inter: int, experts: int, top_k: int, dtype: torch.dtype, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen).to(dtype)
    w13 = (torch.randn(experts, 2 * inter, hidden, generator=gen) / hidden**0.5).to(dtype)
    w2 = (torch.randn(experts, hidden, inter, generator=gen) / inter**0.5).to(dtype)
    logits = torch.randn(tokens, experts, generator=gen)
    weights, ids = OPS.route(logits, Routing(top_k=top_k, renormalize=True))
    return x, ids, weights, w13, w2


def _steps(*args: torch.Tensor) -> torch.Tensor:
    """The three steps, as CpuMoeOps runs them where the kernel does not apply."""
    return MoeOps.experts(OPS, *args)


def _native(kernel: native.MoeExpertsKernel, *args: torch.Tensor) -> torch.Tensor:
    assert native.moe_experts_takes(*args)
    return kernel(*args)


# (tokens, hidden, inter, experts, top_k): decode and prefill sizes of the benchmark's small
# Qwen3-MoE; odd sizes with tails in both GEMMs' K and row groups of 1 to 4.
SHAPES = [
    (1, 256, 64, 8, 2),
    (16, 256, 64, 8, 2),
    (64, 256, 64, 8, 2),
    (7, 100, 24, 5, 3),
    (33, 48, 40, 16, 4),
]
# float32: a few float32 rounding steps of the output's scale; bf16: one bf16 step (the
# gate/up rounding can move an intermediate value by one step, as the loop's oneDNN order).
TOLERANCE = {
    torch.float32: {"rtol": 1e-5, "atol": 1e-5},
    torch.bfloat16: {"rtol": 2**-7, "atol": 2**-7},
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_experts_match_the_three_steps(
    kernel: native.MoeExpertsKernel, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    args = _layer(*shape, dtype=dtype, seed=sum(shape))
    got, want = _native(kernel, *args), _steps(*args)
    assert got.dtype == dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, **TOLERANCE[dtype])
    if dtype is torch.bfloat16:  # few sums round differently; float32 sums differ in the last bits
        assert (got != want).float().mean().item() < 0.02


# A token alone gives each of its experts one row (the 16-output tiles of one row); in a
# batch its rows go in groups of 4 (tiles of 4 x 4), 2 (2 x 8) or 3 (one-row streams), and
# an item's last weight rows are one-row streams too: all of them must give the same bits.
# (12, 96, 40, 4, 2): 3 to 12 rows an expert, tails in K and in the items; (256, 256, 64, 8,
# 2): a prefill of the benchmark's small Qwen3-MoE, every 16th token checked.
# bf16 on a CPU with AMX: (12, 96, 64, 4, 2) and (48, 64, 32, 3, 2) take the tiles (hidden
# and intermediate multiples of 32), with groups of 16 rows an expert padded (6 rows) or
# whole and padded (32 to 33); the prefill takes them too, (12, 96, 40) keeps the dot path.
INVARIANCE = [
    ((12, 96, 40, 4, 2), 1),
    ((256, 256, 64, 8, 2), 16),
    ((12, 96, 64, 4, 2), 1),
    ((48, 64, 32, 3, 2), 1),
]


@pytest.mark.parametrize(
    ("shape", "every"), INVARIANCE, ids=["small", "prefill", "tiles-padded", "tiles-whole"]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_tokens_numbers_do_not_depend_on_its_batch(
    kernel: native.MoeExpertsKernel, shape: tuple[int, ...], every: int, dtype: torch.dtype
) -> None:
    x, ids, weights, w13, w2 = _layer(*shape, dtype=dtype, seed=3)
    batched = _native(kernel, x, ids, weights, w13, w2)
    for t in range(0, x.shape[0], every):
        alone = _native(kernel, x[t : t + 1], ids[t : t + 1], weights[t : t + 1], w13, w2)
        assert torch.equal(alone[0], batched[t])


@pytest.mark.skipif(
    not torch.cpu._is_amx_tile_supported(), reason="this CPU has no AMX: bf16 keeps the dot path"
)
def test_on_a_cpu_with_amx_bf16_layers_of_whole_tiles_take_them(
    kernel: native.MoeExpertsKernel,
) -> None:
    takes = torch.ops.ascend_host_native.moe_experts_amx_takes
    assert takes(256, 64) and takes(2048, 768)
    assert not takes(100, 64) and not takes(256, 40)  # K of a GEMM not a multiple of 32
    args = _layer(33, 64, 32, 4, 2, dtype=torch.bfloat16, seed=5)
    torch.testing.assert_close(_native(kernel, *args), _steps(*args), **TOLERANCE[torch.bfloat16])


def test_slots_of_other_ranks_experts_are_left_out(kernel: native.MoeExpertsKernel) -> None:
    x, ids, weights, w13, w2 = _layer(9, 64, 32, 6, 3, torch.bfloat16, seed=5)
    local = torch.where(ids >= 3, ids - 3, -1).to(torch.int32)  # rank 1 of 2: experts 3-5
    assert (local < 0).any() and (local >= 0).any()
    got = _native(kernel, x, local, weights, w13[3:].contiguous(), w2[3:].contiguous())
    torch.testing.assert_close(
        got, _steps(x, local, weights, w13[3:], w2[3:]), rtol=2**-7, atol=2**-7
    )
    none_here = torch.full_like(local, -1)
    assert torch.equal(_native(kernel, x, none_here, weights, w13, w2), torch.zeros_like(x))


def test_an_expert_id_past_the_layer_is_an_error(kernel: native.MoeExpertsKernel) -> None:
    x, ids, weights, w13, w2 = _layer(4, 64, 32, 4, 2, torch.float32, seed=7)
    ids[2, 1] = 4
    with pytest.raises(RuntimeError, match="local expert id 4 is past the layer's 4 experts"):
        kernel(x, ids, weights, w13, w2)


def test_int64_ids_give_the_int32_results(kernel: native.MoeExpertsKernel) -> None:
    x, ids, weights, w13, w2 = _layer(5, 64, 32, 4, 2, torch.float32, seed=9)
    assert torch.equal(
        _native(kernel, x, ids.long(), weights, w13, w2), _native(kernel, x, ids, weights, w13, w2)
    )


def test_what_the_kernel_does_not_take_it_declines_and_the_steps_serve(
    kernel: native.MoeExpertsKernel,
) -> None:
    x, ids, weights, w13, w2 = _layer(4, 64, 32, 4, 2, torch.float16, seed=11)
    assert not native.moe_experts_takes(x, ids, weights, w13, w2)  # no float16 dot kernel
    assert not OPS.traces_in_graph(w13, w2)  # the steps' loop would break a graph
    with pytest.raises(RuntimeError, match=r"check native\.moe_experts_takes before calling"):
        kernel(x, ids, weights, w13, w2)
    assert torch.equal(OPS.experts(x, ids, weights, w13, w2), _steps(x, ids, weights, w13, w2))
    x, ids, weights, w13, w2 = _layer(4, 64, 32, 4, 2, torch.float32, seed=11)
    assert OPS.traces_in_graph(w13, w2)
    strided = w13.transpose(1, 2).contiguous().transpose(1, 2)  # same values, not contiguous
    assert not native.moe_experts_takes(x, ids, weights, strided, w2)
    assert not OPS.traces_in_graph(strided, w2)
    with pytest.raises(RuntimeError, match="moe_experts: takes hidden"):
        kernel(x, ids, weights, strided, w2)
    torch.testing.assert_close(
        OPS.experts(x, ids, weights, strided, w2), _steps(x, ids, weights, w13, w2)
    )


def test_the_shape_functions_keep_the_token_count_symbolic(
    kernel: native.MoeExpertsKernel, route_kernel: native.MoeRouteKernel
) -> None:
    """The Meta kernels a compiled graph traces with: shapes and dtypes of the CPU ops'
    results, for any token count (a dynamic batch dimension is not pinned)."""
    x, ids, weights, w13, w2 = _layer(6, 64, 32, 4, 2, torch.bfloat16, seed=5)
    routing = Routing(top_k=2, renormalize=True)

    def layer(x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        weights, ids = OPS.route(logits, routing)
        return OPS.experts(x, ids, weights, w13, w2)

    compiled = torch.compile(layer, fullgraph=True, dynamic=True, backend="eager")

    def check(tokens: int) -> None:
        logits = torch.randn(tokens, 4)
        rows = torch.randn(tokens, 64).to(torch.bfloat16)
        assert torch.equal(compiled(rows, logits), layer(rows, logits))

    check(3)
    with torch.compiler.set_stance("fail_on_recompile"):  # a pinned size would recompile
        check(6)
        check(9)
    meta = route_kernel(torch.empty(5, 8, device="meta"), 3, False, True, 1.0)
    assert [(t.shape, t.dtype) for t in meta] == [((5, 3), torch.float32), ((5, 3), torch.int32)]
    out = kernel(*(t.to("meta") for t in (x, ids, weights, w13, w2)))
    assert (out.shape, out.dtype, out.device.type) == (x.shape, x.dtype, "meta")


def test_the_host_ops_take_the_kernel(kernel: native.MoeExpertsKernel) -> None:
    args = _layer(16, 256, 64, 8, 2, torch.float32, seed=13)
    assert torch.equal(OPS.experts(*args), _native(kernel, *args))


@pytest.fixture(scope="module")
def route_kernel() -> native.MoeRouteKernel:
    return built_or_skip(native.moe_route(), "MoE routing", "the torch route")


@pytest.mark.parametrize(("tokens", "experts", "top_k"), [(1, 8, 2), (5, 64, 8), (64, 128, 4)])
@pytest.mark.parametrize("scoring", [Scoring.SOFTMAX, Scoring.SIGMOID])
@pytest.mark.parametrize(("renormalize", "scaling"), [(False, 1.0), (True, 1.0), (True, 2.5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_plain_top_k_routing_is_the_torch_routes_bits(
    route_kernel: native.MoeRouteKernel,
    tokens: int,
    experts: int,
    top_k: int,
    scoring: Scoring,
    renormalize: bool,
    scaling: float,
    dtype: torch.dtype,
) -> None:
    gen = torch.Generator().manual_seed(tokens * experts + top_k)
    logits = torch.randn(tokens, experts, generator=gen).to(dtype)
    routing = Routing(
        top_k=top_k, scoring=scoring, renormalize=renormalize, routed_scaling_factor=scaling
    )
    weights, ids = OPS.route(logits, routing)  # through the native op
    want_weights, want_ids = OPS._route(logits, routing, None)
    assert (weights.dtype, ids.dtype) == (torch.float32, torch.int32)
    assert torch.equal(ids, want_ids)
    assert torch.equal(weights.view(torch.int32), want_weights.view(torch.int32))
    got = route_kernel(logits, top_k, scoring is Scoring.SIGMOID, renormalize, scaling)
    assert torch.equal(got[0], weights) and torch.equal(got[1], ids)


def test_grouped_or_biased_routing_keeps_the_torch_route(
    route_kernel: native.MoeRouteKernel,
) -> None:
    """The op has no expert groups or correction bias: those rules stay in torch ops."""
    logits = torch.randn(6, 16, generator=torch.Generator().manual_seed(1))
    bias = torch.linspace(-1, 1, 16)
    grouped = Routing(top_k=2, scoring=Scoring.SIGMOID, num_expert_group=4, topk_group=2)
    plain = Routing(top_k=2, scoring=Scoring.SIGMOID)
    for routing, correction in ((grouped, None), (plain, bias)):
        weights, ids = OPS.route(logits, routing, correction)
        want_weights, want_ids = OPS._route(logits, routing, correction)
        assert torch.equal(ids, want_ids) and torch.equal(weights, want_weights)
    # the bias moves the choice: the plain op, which has none, would pick otherwise
    biased_ids = OPS.route(logits, plain, bias)[1]
    assert not torch.equal(biased_ids, route_kernel(logits, 2, True, False, 1.0)[1])


def test_routing_refuses_a_top_k_past_the_experts(route_kernel: native.MoeRouteKernel) -> None:
    with pytest.raises(RuntimeError, match="1 <= top_k <= E"):
        route_kernel(torch.randn(2, 4), 5, False, True, 1.0)


def _hard_logits(tokens: int, experts: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Rows that try the one-pass softmax's every branch: many exact ties (a few values
    repeated, where the top-k order is torch's tie order), plain random rows, a NaN, +inf
    (inf - inf is NaN), -inf, and a row all -inf."""
    gen = torch.Generator().manual_seed(seed)
    ties = torch.randint(-2, 3, (tokens, experts), generator=gen).float() / 2
    plain = torch.randn(tokens, experts, generator=gen) * 4
    logits = torch.where(torch.arange(tokens)[:, None] % 2 == 0, ties, plain)
    logits[1, experts // 2] = float("nan")
    logits[3, 0] = float("inf")
    logits[5, experts - 1] = float("-inf")
    logits[7] = float("-inf")
    return logits.to(dtype)


@pytest.mark.parametrize("experts", [2, 7, 8, 15, 16, 17, 60, 128, 256])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_softmax_routing_keeps_torchs_bits_on_ties_nans_and_widths_not_a_vector(
    route_kernel: native.MoeRouteKernel, experts: int, dtype: torch.dtype
) -> None:
    """300 tokens: more rows than one thread's share at 128 experts and more. Every row's
    choice, its order among ties and its weights' bits (NaN payloads included) as the
    torch route gives them."""
    logits = _hard_logits(300, experts, dtype, seed=experts)
    for top_k in sorted({1, 2, min(4, experts), min(8, experts)}):
        routing = Routing(top_k=top_k, renormalize=True, routed_scaling_factor=1.5)
        got_weights, got_ids = route_kernel(logits, top_k, False, True, 1.5)
        want_weights, want_ids = OPS._route(logits, routing, None)
        assert torch.equal(got_ids, want_ids), (experts, top_k)
        assert torch.equal(got_weights.view(torch.int32), want_weights.view(torch.int32))


def test_routing_reads_rows_with_a_stride(route_kernel: native.MoeRouteKernel) -> None:
    """Logits that are a column slice of a wider tensor (rows not back to back)."""
    wide = torch.randn(20, 24, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    logits = wide[:, :8]
    got = route_kernel(logits, 2, False, True, 1.0)
    want = route_kernel(logits.contiguous(), 2, False, True, 1.0)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    want_weights, want_ids = OPS._route(logits, Routing(top_k=2, renormalize=True), None)
    assert torch.equal(got[1], want_ids) and torch.equal(got[0], want_weights)


def test_routing_at_a_lower_torch_width_keeps_torchs_ops() -> None:
    """ATEN_CPU_CAPABILITY=default: torch's softmax runs its scalar-width kernels, which
    the one-pass softmax does not copy; the op scores with torch's ops then, same bits."""
    script = "\n".join([
        "import torch",
        "from adapters.cpu import native",
        "from adapters.cpu.moe import CpuMoeOps",
        "from ports.moe import Routing",
        inspect.getsource(_hard_logits),
        "assert torch.backends.cpu.get_cpu_capability() == 'DEFAULT'",
        "kernel = native.moe_route()",
        "if kernel is None: print('unbuilt'); raise SystemExit",
        "logits = _hard_logits(64, 60, torch.bfloat16, seed=1)",
        "w, i = kernel(logits, 4, False, True, 1.0)",
        "ww, wi = CpuMoeOps()._route(logits, Routing(top_k=4, renormalize=True), None)",
        "print(torch.equal(i, wi) and torch.equal(w.view(torch.int32), ww.view(torch.int32)))",
    ])
    src = Path(native.__file__).resolve().parents[3]
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True,
        timeout=600,
    ).stdout.strip().splitlines()[-1]
    if out == "unbuilt":
        pytest.skip("the native kernels are not built here")
    assert out == "True"
