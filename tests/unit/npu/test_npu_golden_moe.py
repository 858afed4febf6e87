"""Golden tests: NpuMoeOps on the emulated torch_npu against the host's CpuMoeOps.

The emulator computes each MoE op from its documented formula (semantics_moe.py),
independently of CpuMoeOps, after binding the call to the 2.14.0 schema; so these check
the adapter's argument choices (norm type, group mode, active expert range, count-type
group lists, transposed weight views, the gather index of the combine), not the NPU
kernels. The results agree bit for bit where the host twin keeps the ops' precision
contract (float32 inside, one rounding at each op's output).
"""

from __future__ import annotations

import pytest
import torch

from adapters.cpu.moe import CpuMoeOps
from adapters.npu.moe import NpuMoeOps
from ascend_core.errors import UnsupportedFeatureError
from ports.moe import Routing, Scoring
from support import reference_moe_mla as ref
from support.torch_npu_emulator import make_torch_npu

HOST = CpuMoeOps(native_kernels=False)
V3 = Routing(
    top_k=2,
    scoring=Scoring.SIGMOID,
    renormalize=True,
    num_expert_group=4,
    topk_group=2,
    routed_scaling_factor=2.5,
)
QWEN3 = Routing(top_k=2, scoring=Scoring.SOFTMAX, renormalize=True)
V2_LITE = Routing(top_k=3, scoring=Scoring.SOFTMAX, renormalize=False)


@pytest.fixture
def tnpu():
    return make_torch_npu()


@pytest.fixture
def npu(tnpu) -> NpuMoeOps:
    return NpuMoeOps(tnpu)


@pytest.mark.parametrize(("routing", "biased"), [(V3, True), (QWEN3, False), (V2_LITE, False)])
def test_route(npu, tnpu, routing: Routing, biased: bool) -> None:
    g = torch.Generator().manual_seed(5)
    logits = (2 * torch.randn(40, 16, generator=g)).to(torch.bfloat16)
    bias = 0.3 * torch.randn(16, generator=g) if biased else None
    got = ref.routes_of(*npu.route(logits, routing, bias))
    want = ref.routes_of(*HOST.route(logits, routing, bias))
    assert [set(x) for x in got] == [set(x) for x in want]
    for a, b in zip(got, want, strict=True):
        for e in b:
            assert a[e] == pytest.approx(b[e], rel=1e-5, abs=1e-6)
    op = (
        "npu_moe_gating_top_k"
        if routing.scoring is Scoring.SIGMOID
        else ("npu_moe_gating_top_k_softmax")
    )
    assert len(tnpu.calls_of(op)) == 1
    if biased:
        call = tnpu.calls_of(op)[0]
        assert (call["norm_type"], call["group_select_mode"], call["k_group"]) == (1, 1, 2)


@pytest.mark.parametrize("routing", [QWEN3, V2_LITE])  # k = 2, 3
@pytest.mark.parametrize("held", [None, [1, 3, 4, 6]])  # all experts; or half (expert parallel)
def test_permute_grouped_mlp_unpermute(npu, tnpu, held: list[int] | None, routing) -> None:  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(6)
    tokens, hidden, inter, experts = 23, 32, 16, 8
    bf = torch.bfloat16
    x = torch.randn(tokens, hidden, generator=g).to(bf)
    w13 = (torch.randn(experts, 2 * inter, hidden, generator=g) / hidden**0.5).to(bf)
    w2 = (torch.randn(experts, hidden, inter, generator=g) / inter**0.5).to(bf)
    weights, ids = HOST.route(torch.randn(tokens, experts, generator=g), routing)
    local = ids
    if held is not None:
        expert_map = torch.full((experts,), -1, dtype=torch.int32)
        expert_map[held] = torch.arange(len(held), dtype=torch.int32)
        local = expert_map[ids.long()]
        w13, w2 = w13[held], w2[held]
    num_local = w13.shape[0]

    def run(ops):  # type: ignore[no-untyped-def]
        rows, perm = ops.permute(x, local, num_local)
        out = ops.unpermute(ops.grouped_mlp(rows, perm.group_sizes, w13, w2), perm, weights)
        return rows, perm, out

    rows, perm, out = run(npu)
    host_rows, host_perm, host_out = run(HOST)
    # The NPU keeps all T*k rows (fixed shapes, nothing read back): the local experts'
    # rows first, in the host's stable expert order, then padding (expert parallel).
    kept = host_rows.shape[0]
    assert rows.shape[0] == tokens * routing.top_k and perm.source_rows.dtype == torch.int64
    assert torch.equal(perm.source_rows[:kept], host_perm.source_rows)
    assert torch.equal(perm.group_sizes, host_perm.group_sizes)
    assert torch.equal(rows[:kept], host_rows)
    assert (kept < rows.shape[0]) == (held is not None)
    assert out.dtype == bf
    # bf16, bit for bit: both sides keep the NPU ops' contract (each matmul accumulated in
    # float32 and rounded once, swiglu in float32, the combine with bf16 weights summed in
    # float32 in slot order and rounded once).
    torch.testing.assert_close(out, host_out, atol=0, rtol=0)
    call = tnpu.calls_of("npu_moe_init_routing_v2")[0]
    assert call["active_expert_range"] == [0, num_local] and call["expert_num"] == num_local + 1
    assert all(c["group_list_type"] == 1 for c in tnpu.calls_of("npu_grouped_matmul"))


@pytest.mark.parametrize("held", [None, [1, 3, 4, 6]])
def test_gpt_oss_experts_match_the_host(npu, tnpu, held: list[int] | None) -> None:  # type: ignore[no-untyped-def]
    """gpt-oss's experts: interleaved gate/up through npu_clipped_swiglu (alpha 1.702,
    limit 7, up + 1), each projection's expert bias added in bf16 after its matmul, as
    the host adds it; the same bits (w13 scaled up so that the clamps come into play)."""
    from ports.moe import ExpertMlp, GateKind

    g = torch.Generator().manual_seed(7)
    tokens, hidden, inter, experts = 23, 32, 16, 8
    bf = torch.bfloat16
    x = torch.randn(tokens, hidden, generator=g).to(bf)
    w13 = (torch.randn(experts, 2 * inter, hidden, generator=g) * 3 / hidden**0.5).to(bf)
    w2 = (torch.randn(experts, hidden, inter, generator=g) / inter**0.5).to(bf)
    b13 = torch.randn(experts, 2 * inter, generator=g).to(bf)
    b2 = torch.randn(experts, hidden, generator=g).to(bf)
    weights, ids = HOST.route(torch.randn(tokens, experts, generator=g), QWEN3)
    local = ids
    if held is not None:
        expert_map = torch.full((experts,), -1, dtype=torch.int32)
        expert_map[held] = torch.arange(len(held), dtype=torch.int32)
        local = expert_map[ids.long()]
        w13, w2, b13, b2 = w13[held], w2[held], b13[held], b2[held]
    mlp = ExpertMlp(gate=GateKind.SWIGLU_OAI, biased=True)
    out = npu.experts(x, local, weights, w13, w2, mlp=mlp, biases=(b13, b2))
    host_out = HOST.experts(x, local, weights, w13, w2, mlp=mlp, biases=(b13, b2))
    torch.testing.assert_close(out, host_out, atol=0, rtol=0)
    (call,) = tnpu.calls_of("npu_clipped_swiglu")
    assert (call["interleaved"], call["alpha"], call["limit"], call["bias"]) == (
        True, 1.702, 7.0, 1.0
    )
    assert not tnpu.calls_of("npu_swiglu")


def test_deepseek_v4_clamped_experts_match_the_host(npu, tnpu) -> None:  # type: ignore[no-untyped-def]
    """DeepSeek-V4's experts: gate-first halves through npu_clipped_swiglu with alpha 1 and
    bias 0 (silu(min(gate, limit)) * clamp(up)); the same bits as the host's loop, with w13
    scaled up so that both clamps cut."""
    from ports.moe import ExpertMlp, GateKind

    g = torch.Generator().manual_seed(11)
    tokens, hidden, inter, experts = 19, 32, 16, 8
    bf = torch.bfloat16
    x = torch.randn(tokens, hidden, generator=g).to(bf)
    w13 = (torch.randn(experts, 2 * inter, hidden, generator=g) * 4 / hidden**0.5).to(bf)
    w2 = (torch.randn(experts, hidden, inter, generator=g) / inter**0.5).to(bf)
    weights, ids = HOST.route(torch.randn(tokens, experts, generator=g), QWEN3)
    mlp = ExpertMlp(gate=GateKind.SILU_CLAMPED, limit=2.0)
    gate_up = torch.einsum("th,eih->tei", x.float(), w13.float())
    assert (gate_up[..., :inter] > 2.0).any() and (gate_up[..., inter:].abs() > 2.0).any()
    out = npu.experts(x, ids, weights, w13, w2, mlp=mlp)
    host_out = HOST.experts(x, ids, weights, w13, w2, mlp=mlp)
    torch.testing.assert_close(out, host_out, atol=0, rtol=0)
    (call,) = tnpu.calls_of("npu_clipped_swiglu")
    assert (call["interleaved"], call["alpha"], call["limit"], call["bias"]) == (
        False, 1.0, 2.0, 0.0
    )
    # The clamps matter: without them the host's result differs.
    plain = HOST.experts(x, ids, weights, w13, w2)
    assert not torch.equal(plain, host_out)


@pytest.mark.parametrize(
    ("routing", "experts", "dtype", "named"),
    [
        (V3, 8, "bfloat16", "8 experts in 4 groups"),  # the tiny DeepSeek-V3 model: 2 per group
        (QWEN3, 8, "float16", "dtype float16"),
        (Routing(top_k=2, scoring=Scoring.SIGMOID), 8, "bfloat16", "without renormalisation"),
        (Routing(top_k=2, num_expert_group=2, topk_group=1), 8, "bfloat16", "softmax scores"),
    ],
)
def test_check_refuses_what_the_ops_cannot_run(
    npu, routing: Routing, experts: int, dtype: str, named: str
) -> None:
    with pytest.raises(UnsupportedFeatureError) as err:
        npu.check(routing, experts, dtype)
    assert named in err.value.what and "VLLM_ASCEND_DEVICE=cpu" in err.value.hint


def test_check_accepts_deepseek_v3_and_qwen3_moe_shapes(npu) -> None:
    npu.check(V3, 16, "bfloat16")
    npu.check(
        Routing(
            top_k=8,
            scoring=Scoring.SIGMOID,
            renormalize=True,
            num_expert_group=8,
            topk_group=4,
            routed_scaling_factor=2.5,
        ),
        256,
        "bfloat16",
    )
    npu.check(QWEN3, 128, "bfloat16")
    HOST.check(V3, 8, "float32")  # the host runs everything
