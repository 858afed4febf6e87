"""CpuMoeOps against the naive loops of support.reference_moe_mla."""

from __future__ import annotations

import pytest
import torch

from adapters.cpu.moe import CpuMoeOps
from ports.moe import Routing, Scoring
from support import reference_moe_mla as ref

OPS = CpuMoeOps(native_kernels=False)  # the torch steps (no compiler in tests/unit)
# float32 vs a float64 oracle over sums of <= 128 products (see test_cpu_ops.TOL).
TOL = {torch.float32: {"atol": 2e-5, "rtol": 1e-5}, torch.bfloat16: {"atol": 3e-2, "rtol": 3e-2}}


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(7)


def _same_routes(got: list[dict[int, float]], want: list[dict[int, float]]) -> None:
    assert [set(g) for g in got] == [set(w) for w in want]
    for g, w in zip(got, want, strict=True):
        for e in w:
            assert g[e] == pytest.approx(w[e], rel=1e-5, abs=1e-6)


ROUTINGS = {
    "qwen3_moe: softmax top-k, renormalised": (
        Routing(top_k=2, scoring=Scoring.SOFTMAX, renormalize=True),
        False,
    ),
    "deepseek_v2: softmax greedy, raw weights": (
        Routing(top_k=3, scoring=Scoring.SOFTMAX, renormalize=False),
        False,
    ),
    "deepseek_v3: sigmoid + bias, grouped, scaled": (
        Routing(
            top_k=2,
            scoring=Scoring.SIGMOID,
            renormalize=True,
            num_expert_group=4,
            topk_group=2,
            routed_scaling_factor=2.5,
        ),
        True,
    ),
    "grouped softmax without bias (group max)": (
        Routing(
            top_k=2, scoring=Scoring.SOFTMAX, renormalize=False, num_expert_group=4, topk_group=1
        ),
        False,
    ),
}


@pytest.mark.parametrize("name", list(ROUTINGS))
def test_route_matches_the_oracle(name: str, gen: torch.Generator) -> None:
    routing, biased = ROUTINGS[name]
    logits = 2 * torch.randn(33, 8, generator=gen)
    bias = 0.3 * torch.randn(8, generator=gen) if biased else None
    weights, ids = OPS.route(logits, routing, bias)
    assert weights.dtype == torch.float32 and ids.dtype == torch.int32
    assert ids.shape == weights.shape == (33, routing.top_k)
    want = ref.route(
        logits,
        routing.top_k,
        routing.scoring is Scoring.SOFTMAX,
        routing.renormalize,
        routing.num_expert_group,
        routing.topk_group,
        routing.routed_scaling_factor,
        bias,
    )
    _same_routes(ref.routes_of(weights, ids), want)


def test_the_correction_bias_changes_selection_not_weights(gen: torch.Generator) -> None:
    routing = Routing(top_k=2, scoring=Scoring.SIGMOID, renormalize=False)
    logits = torch.randn(16, 8, generator=gen)
    bias = torch.zeros(8)
    bias[5] = 10.0  # expert 5 always wins a slot, at its own sigmoid score
    weights, ids = OPS.route(logits, routing, bias)
    assert bool((ids == 5).any(dim=1).all())
    at5 = (ids == 5).nonzero()
    torch.testing.assert_close(weights[at5[:, 0], at5[:, 1]], logits[:, 5].sigmoid())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_permute_experts_unpermute_matches_the_oracle(
    dtype: torch.dtype, gen: torch.Generator
) -> None:
    tokens, hidden, inter, experts, top_k = 29, 32, 24, 6, 2
    x = torch.randn(tokens, hidden, generator=gen).to(dtype)
    w13 = (torch.randn(experts, 2 * inter, hidden, generator=gen) / hidden**0.5).to(dtype)
    w2 = (torch.randn(experts, hidden, inter, generator=gen) / inter**0.5).to(dtype)
    weights, ids = OPS.route(
        torch.randn(tokens, experts, generator=gen), Routing(top_k=top_k, renormalize=True)
    )
    rows, perm = OPS.permute(x, ids, experts)
    assert rows.shape == (tokens * top_k, hidden) and int(perm.group_sizes.sum()) == tokens * top_k
    # Rows come grouped by expert, in expert order.
    sorted_ids = ids.reshape(-1).long()[perm.source_rows]
    assert torch.equal(sorted_ids, torch.sort(sorted_ids).values)
    out = OPS.unpermute(OPS.grouped_mlp(rows, perm.group_sizes, w13, w2), perm, weights)
    assert out.dtype == dtype and out.shape == x.shape
    want = ref.moe(x, ref.routes_of(weights, ids), w13, w2)
    torch.testing.assert_close(out.to(torch.float64), want, **TOL[dtype])


def test_expert_parallel_slots_of_other_ranks_add_nothing(gen: torch.Generator) -> None:
    """Half the experts here (global 1, 3, 5 as local 0, 1, 2): the two ranks' sums add
    up to the whole layer, as the all-reduce after an expert-parallel MoE makes them."""
    tokens, hidden, inter, experts = 17, 16, 8, 6
    x = torch.randn(tokens, hidden, generator=gen)
    w13 = torch.randn(experts, 2 * inter, hidden, generator=gen) / hidden**0.5
    w2 = torch.randn(experts, hidden, inter, generator=gen) / inter**0.5
    weights, ids = OPS.route(torch.randn(tokens, experts, generator=gen), Routing(top_k=2))
    total = torch.zeros(tokens, hidden, dtype=torch.float64)
    for held in ([0, 2, 4], [1, 3, 5]):
        expert_map = torch.full((experts,), -1, dtype=torch.int32)
        expert_map[held] = torch.arange(3, dtype=torch.int32)
        local_ids = expert_map[ids.long()]
        rows, perm = OPS.permute(x, local_ids, 3)
        assert rows.shape[0] == int((local_ids >= 0).sum())
        part = OPS.unpermute(
            OPS.grouped_mlp(rows, perm.group_sizes, w13[held], w2[held]), perm, weights
        )
        want = ref.moe(
            x,
            ref.routes_of(weights, ids),
            w13[held],
            w2[held],
            local={g: i for i, g in enumerate(held)},
        )
        torch.testing.assert_close(part.double(), want, **TOL[torch.float32])
        total += part.double()
    torch.testing.assert_close(
        total, ref.moe(x, ref.routes_of(weights, ids), w13, w2), **TOL[torch.float32]
    )


def test_experts_without_rows_are_skipped_and_empty_batches_work(gen: torch.Generator) -> None:
    x = torch.randn(3, 8, generator=gen)
    ids = torch.tensor([[2, 2], [2, 2], [2, 2]], dtype=torch.int32)  # only expert 2
    w13 = torch.randn(4, 8, 8, generator=gen)
    w2 = torch.randn(4, 8, 4, generator=gen)
    rows, perm = OPS.permute(x, ids, 4)
    assert perm.group_sizes.tolist() == [0, 0, 6, 0]
    out = OPS.unpermute(
        OPS.grouped_mlp(rows, perm.group_sizes, w13, w2), perm, torch.full((3, 2), 0.5)
    )
    want = ref.moe(x, [{2: 1.0}] * 3, w13, w2)  # two half-weight slots of one expert
    torch.testing.assert_close(out.double(), want, **TOL[torch.float32])
    rows, perm = OPS.permute(x[:0], ids[:0], 4)
    assert OPS.unpermute(
        OPS.grouped_mlp(rows, perm.group_sizes, w13, w2), perm, torch.zeros(0, 2)
    ).shape == (0, 8)


def test_gpt_oss_experts_follow_the_transformers_formula() -> None:
    """gpt-oss's experts in float32 against its formula written out per token and slot
    (transformers' GptOssExperts, weights in vLLM's [E, out, in] layout): interleaved
    gate/up with their bias, gate clamped above at 7, up to [-7, 7], (up + 1) * gate *
    sigmoid(1.702 gate), then the down projection and its bias; a missing bias refused."""
    from ports.moe import ExpertMlp, GateKind

    g = torch.Generator().manual_seed(3)
    tokens, hidden, inter, experts = 9, 16, 8, 4
    x = torch.randn(tokens, hidden, generator=g)
    w13 = torch.randn(experts, 2 * inter, hidden, generator=g)  # large: the clamps act
    w2 = torch.randn(experts, hidden, inter, generator=g) / inter**0.5
    b13 = torch.randn(experts, 2 * inter, generator=g)
    b2 = torch.randn(experts, hidden, generator=g)
    weights, ids = OPS.route(torch.randn(tokens, experts, generator=g), Routing(top_k=2))
    mlp = ExpertMlp(gate=GateKind.SWIGLU_OAI, biased=True)
    out = OPS.experts(x, ids, weights, w13, w2, mlp=mlp, biases=(b13, b2))
    expected = torch.zeros(tokens, hidden, dtype=torch.float64)
    clamped = 0
    for t in range(tokens):
        for slot in range(2):
            e = int(ids[t, slot])
            gate_up = x[t].double() @ w13[e].double().t() + b13[e].double()
            gate, up = gate_up[::2], gate_up[1::2]
            clamped += int((gate > 7).sum() + (up.abs() > 7).sum())
            gate, up = gate.clamp(max=7.0), up.clamp(-7.0, 7.0)
            act = (up + 1) * gate * torch.sigmoid(1.702 * gate)
            expected[t] += float(weights[t, slot]) * (act @ w2[e].double().t() + b2[e].double())
    assert clamped > 0
    torch.testing.assert_close(out.double(), expected, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="biased"):
        OPS.experts(x, ids, weights, w13, w2, mlp=mlp)
