"""The emulated npu_sparse_flash_attention's sinks and softmax LSE, and npu_attention_update,
against plain torch written here (not the emulator's code, not the host adapter's).

Facts (ops-transformer's SparseFlashAttention and AttentionUpdate docs; the 2.14.0 wheel's
meta kernel of npu_sparse_flash_attention): `sinks` float32 (N1), one logit per query head
in the softmax's denominator, Ascend 950PR/950DT only; with return_softmax_lse the 2nd
and 3rd outputs are softmax_max and softmax_sum, float32 (KV_N, T, N1 / KV_N) for a TND
query, lse = max + log(sum) (natural log), empty without it; the LSE is refused with
PA_BSND keys on A2/A3; attention_mode takes only 2; layout_kv BSND or TND needs the same
layout_query. AttentionUpdate: O = sum_i O_i exp(lse_i - lse_m), lse_m the log-sum-exp of
the lse_i (valid as the second output for update_type 1); sp in [1, 16], head_dim in
[8, 512] and a multiple of 8.
"""

from __future__ import annotations

import pytest
import torch

from support.torch_npu_emulator import make_torch_npu

BF, F32 = torch.bfloat16, torch.float32
TOKENS, HEADS, DIM, ROPE, ROWS, SCALE = 5, 4, 64, 64, 12, 0.125
A2, A3, A5 = "Ascend910B1", "Ascend910_9382", "Ascend950PR"


def _inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    visible = torch.rand(TOKENS, ROWS, generator=g) < 0.6
    visible[:, 0] = True
    return {
        "q": torch.randn(TOKENS, HEADS, DIM, generator=g).to(BF),
        "q_rope": torch.randn(TOKENS, HEADS, ROPE, generator=g).to(BF),
        "k": torch.randn(ROWS, 1, DIM, generator=g).to(BF),
        "k_rope": torch.randn(ROWS, 1, ROPE, generator=g).to(BF),
        "sinks": torch.randn(HEADS, generator=g),
        "visible": visible,
    }


def _indices(visible: torch.Tensor) -> torch.Tensor:
    """Each row's visible positions first, -1 after: (T, 1, ROWS) int32."""
    out = torch.full(visible.shape, -1, dtype=torch.int32)
    for t, row in enumerate(visible):
        picked = row.nonzero().flatten()
        out[t, : len(picked)] = picked.to(torch.int32)
    return out.view(TOKENS, 1, ROWS)


def _call(tnpu, x: dict[str, torch.Tensor], visible: torch.Tensor, **kw):  # type: ignore[no-untyped-def]
    return tnpu.npu_sparse_flash_attention(
        x["q"], x["k"], x["k"], _indices(visible), SCALE,
        actual_seq_lengths_query=torch.tensor([TOKENS], dtype=torch.int32),
        actual_seq_lengths_kv=torch.tensor([ROWS], dtype=torch.int32),
        query_rope=x["q_rope"], key_rope=x["k_rope"], layout_query="TND", layout_kv="TND",
        sparse_mode=0, attention_mode=2, **kw,
    )


def _scores(x: dict[str, torch.Tensor], visible: torch.Tensor) -> torch.Tensor:
    """Scaled scores [T, N, R] over D + rope D, -inf where not visible."""
    s = (torch.einsum("thd,rd->thr", x["q"].float(), x["k"][:, 0].float())
         + torch.einsum("thd,rd->thr", x["q_rope"].float(), x["k_rope"][:, 0].float())) * SCALE
    return s.masked_fill(~visible[:, None, :], float("-inf"))


def _reference(x: dict[str, torch.Tensor], visible: torch.Tensor,
               sinks: torch.Tensor | None = None) -> torch.Tensor:
    s = _scores(x, visible)
    if sinks is not None:  # one more logit per head, with no value
        s = torch.cat([s, sinks.view(1, -1, 1).expand(TOKENS, -1, 1)], dim=-1)
    p = s.softmax(dim=-1)[..., :ROWS]
    return torch.einsum("thr,rd->thd", p, x["k"][:, 0].float())


def test_sinks_join_the_denominator_on_ascend_950() -> None:
    x = _inputs()
    tnpu = make_torch_npu(soc_name=A5)
    out, top, total = _call(tnpu, x, x["visible"], sinks=x["sinks"])
    want = _reference(x, x["visible"], x["sinks"])
    torch.testing.assert_close(out.float(), want, atol=1e-2, rtol=1e-2)
    without, _, _ = _call(tnpu, x, x["visible"])
    assert (out.float() - without.float()).abs().max() > 0.05  # the sinks change it
    assert top.numel() == total.numel() == 0  # no LSE asked: both empty


@pytest.mark.parametrize("soc", [A2, A3])
def test_a2_and_a3_refuse_sinks(soc: str) -> None:
    x = _inputs()
    with pytest.raises(ValueError, match="sinks: Ascend 950PR/950DT only"):
        _call(make_torch_npu(soc_name=soc), x, x["visible"], sinks=x["sinks"])


def test_sinks_must_be_float32_per_query_head() -> None:
    x = _inputs()
    with pytest.raises(ValueError, match=r"float32, shape \(N1\)"):
        _call(make_torch_npu(soc_name=A5), x, x["visible"], sinks=x["sinks"].to(BF))
    with pytest.raises(ValueError, match=r"float32, shape \(N1\)"):
        _call(make_torch_npu(soc_name=A5), x, x["visible"], sinks=x["sinks"][:2])


def test_the_lse_is_max_plus_log_sum_per_token_and_head() -> None:
    x = _inputs(1)
    out, top, total = _call(make_torch_npu(), x, x["visible"], return_softmax_lse=True)
    assert top.dtype == total.dtype == F32
    assert top.shape == total.shape == (1, TOKENS, HEADS)  # (KV_N, T, N1 / KV_N)
    s = _scores(x, x["visible"])
    torch.testing.assert_close(top[0], s.max(dim=-1).values, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close((top + total.log())[0], torch.logsumexp(s, dim=-1),
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.float(), _reference(x, x["visible"]), atol=1e-2, rtol=1e-2)


def test_attention_update_of_two_parts_is_one_attention_over_their_union() -> None:
    """The visible rows split in two disjoint parts (each token sees at least one row in
    each): each part's attention and LSE, combined, equal one call over the union."""
    x = _inputs(2)
    tnpu = make_torch_npu()
    first = x["visible"].clone()
    first[:, ROWS // 2:] = False
    first[:, 0] = True
    second = x["visible"] & ~first
    second[:, -1] = True
    union = first | second
    parts = [_call(tnpu, x, part, return_softmax_lse=True) for part in (first, second)]
    lse = [(top + total.log()).reshape(-1) for _, top, total in parts]
    outs = [out.float().reshape(TOKENS * HEADS, DIM) for out, _, _ in parts]
    merged, merged_lse = tnpu.npu_attention_update(lse, outs, 1)
    whole, top, total = _call(tnpu, x, union, return_softmax_lse=True)
    # Each part's output rounded to bf16 once: within bf16's rounding of the reference.
    torch.testing.assert_close(merged.view(TOKENS, HEADS, DIM), _reference(x, union),
                               atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(merged.view(TOKENS, HEADS, DIM), whole.float(),
                               atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(merged_lse, (top + total.log()).reshape(-1),
                               atol=1e-5, rtol=1e-5)
    (call,) = tnpu.calls_of("npu_attention_update")
    assert call["update_type"] == 1


def test_a_sink_is_a_part_with_its_logit_as_lse_and_no_output() -> None:
    """What DeepSeek-V4's NPU attention relies on: folding a zero output whose LSE is the
    sink logit into an attention gives the attention with that sink (A2: no `sinks`)."""
    x = _inputs(3)
    tnpu = make_torch_npu()
    out, top, total = _call(tnpu, x, x["visible"], return_softmax_lse=True)
    lse = (top + total.log()).reshape(-1)
    sink_lse = x["sinks"].view(1, HEADS).expand(TOKENS, HEADS).reshape(-1).contiguous()
    local = out.reshape(TOKENS * HEADS, DIM)
    merged, ignored = tnpu.npu_attention_update(
        [lse, sink_lse], [local, torch.zeros_like(local)], 0
    )
    assert merged.dtype == BF and ignored.shape == (TOKENS * HEADS,)
    torch.testing.assert_close(merged.view(TOKENS, HEADS, DIM).float(),
                               _reference(x, x["visible"], x["sinks"]), atol=1e-2, rtol=1e-2)


def test_the_lse_with_paged_keys_only_on_ascend_950() -> None:
    x = _inputs()
    cache = x["k"].view(1, ROWS, 1, DIM).expand(2, ROWS, 1, DIM).contiguous()
    rope = x["k_rope"].view(1, ROWS, 1, ROPE).expand(2, ROWS, 1, ROPE).contiguous()

    def paged(soc: str):  # type: ignore[no-untyped-def]
        return make_torch_npu(soc_name=soc).npu_sparse_flash_attention(
            x["q"], cache, cache, _indices(x["visible"]), SCALE,
            block_table=torch.zeros(1, 1, dtype=torch.int32),
            actual_seq_lengths_query=torch.tensor([TOKENS], dtype=torch.int32),
            actual_seq_lengths_kv=torch.tensor([ROWS], dtype=torch.int32),
            query_rope=x["q_rope"], key_rope=rope, layout_query="TND", layout_kv="PA_BSND",
            sparse_mode=0, attention_mode=2, return_softmax_lse=True,
        )

    for soc in (A2, A3):
        with pytest.raises(ValueError, match="PA_BSND: not on A2/A3"):
            paged(soc)
    out, top, _ = paged(A5)
    tnd, tnd_top, _ = _call(make_torch_npu(), x, x["visible"], return_softmax_lse=True)
    assert torch.equal(out, tnd) and torch.equal(top, tnd_top)  # the same rows either way


def test_the_documented_refusals() -> None:
    x = _inputs()
    tnpu = make_torch_npu()
    with pytest.raises(ValueError, match="attention_mode 2"):
        tnpu.npu_sparse_flash_attention(
            x["q"], x["k"], x["k"], _indices(x["visible"]), SCALE,
            actual_seq_lengths_query=torch.tensor([TOKENS], dtype=torch.int32),
            actual_seq_lengths_kv=torch.tensor([ROWS], dtype=torch.int32),
            query_rope=x["q_rope"], key_rope=x["k_rope"], layout_query="TND",
            layout_kv="TND", sparse_mode=0)
    with pytest.raises(ValueError, match="layout_query must be the same"):
        tnpu.npu_sparse_flash_attention(
            x["q"], x["k"], x["k"], _indices(x["visible"]), SCALE,
            query_rope=x["q_rope"], key_rope=x["k_rope"], layout_query="BSND",
            layout_kv="TND", sparse_mode=0, attention_mode=2)
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        _call(tnpu, {**x, "q": x["q"].float(), "k": x["k"].float()}, x["visible"])
    local = torch.zeros(6, 12)
    with pytest.raises(ValueError, match="head_dim in \\[8, 512\\]"):
        tnpu.npu_attention_update([torch.zeros(6)] * 2, [local] * 2, 0)
    local = torch.zeros(6, 16)
    with pytest.raises(ValueError, match="sp in \\[1, 16\\]"):
        tnpu.npu_attention_update([torch.zeros(6)] * 17, [local] * 17, 0)
    with pytest.raises(ValueError, match="lse: float32"):
        tnpu.npu_attention_update([torch.zeros(6, dtype=BF)] * 2, [local] * 2, 0)


def test_tnd_keys_of_two_batches_are_each_batchs_own() -> None:
    """Tokens 0-2 over keys 0-6 and tokens 3-4 over keys 7-11 (running sums 3, 5 and 7, 12):
    each batch's indices count from its own first key."""
    x = _inputs(4)
    local = torch.full((TOKENS, 1, 4), -1, dtype=torch.int32)
    local[:3, 0, :3] = torch.tensor([0, 6, 2], dtype=torch.int32)
    local[3:, 0, :4] = torch.tensor([4, 0, 1, 3], dtype=torch.int32)
    out, top, total = make_torch_npu().npu_sparse_flash_attention(
        x["q"], x["k"], x["k"], local, SCALE,
        actual_seq_lengths_query=torch.tensor([3, 5], dtype=torch.int32),
        actual_seq_lengths_kv=torch.tensor([7, 12], dtype=torch.int32),
        query_rope=x["q_rope"], key_rope=x["k_rope"], layout_query="TND", layout_kv="TND",
        sparse_mode=0, attention_mode=2, return_softmax_lse=True,
    )
    visible = torch.zeros(TOKENS, ROWS, dtype=torch.bool)
    visible[:3, [0, 6, 2]] = True
    visible[3:, [11, 7, 8, 10]] = True  # 7 + (4, 0, 1, 3)
    torch.testing.assert_close(out.float(), _reference(x, visible), atol=1e-2, rtol=1e-2)
    torch.testing.assert_close((top + total.log())[0], torch.logsumexp(_scores(x, visible), -1),
                               atol=1e-5, rtol=1e-5)
