"""Kimi delta attention (KDA) on the linear-attention port in torch: the delta rule with a gate
per key channel (g [T, H, Dk]). The chunked form (prefills) and the recurrent form (decodes)
both equal a naive token-by-token recurrence, slots carry sequences across calls, and a gate
equal across channels gives the gated delta net's (per-head gate) results."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from adapters.torch.linear_attention import CHUNK, TorchLinearAttentionOps
from support.state_sequences import state_sequences as _seqs

H, DK, DV = 3, 16, 8
SCALE = DK**-0.5


def _inputs(tokens: int, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(tokens, H, DK, generator=gen), dim=-1)
    k = F.normalize(torch.randn(tokens, H, DK, generator=gen), dim=-1)
    v = torch.randn(tokens, H, DV, generator=gen)
    # Channels decay at very different rates (some near 1, some fast), as KDA's gates do.
    g = -torch.rand(tokens, H, DK, generator=gen) * torch.linspace(0.01, 3.0, DK)
    beta = torch.rand(tokens, H, generator=gen)
    return q, k, v, g, beta


def _naive(q, k, v, g, beta, state):  # type: ignore[no-untyped-def]
    """Token by token, in float64: S [H, Dk, Dv]; S <- diag(exp g) S; S += k beta (v - S^T k)^T;
    o = scale S^T q."""
    s = state.double().clone()
    out = []
    for t in range(q.shape[0]):
        s = s * g[t].double().exp()[..., None]
        kt, vt, qt = k[t].double(), v[t].double(), q[t].double()
        predicted = torch.einsum("hkv,hk->hv", s, kt)
        delta = (vt - predicted) * beta[t].double()[:, None]
        s = s + kt[..., None] * delta[:, None, :]
        out.append(torch.einsum("hkv,hk->hv", s, qt) * SCALE)
    return torch.stack(out).float(), s.float()


def test_chunked_equals_naive_recurrence_per_sequence_and_slot() -> None:
    ops = TorchLinearAttentionOps()
    lens, slots, initial = [5, CHUNK + 6, 2 * CHUNK + 2], [3, 0, 1], [False, True, False]
    q, k, v, g, beta = _inputs(sum(lens), seed=0)
    states = torch.randn(4, H, DV, DK, generator=torch.Generator().manual_seed(1))
    before = states.clone()
    out = ops.chunk_gated_delta_rule(
        q, k, v, g, beta, states, _seqs(lens, slots, initial), SCALE
    )
    start = 0
    for n, slot, init in zip(lens, slots, initial, strict=True):
        rows = slice(start, start + n)
        first = before[slot].transpose(-1, -2) if init else torch.zeros(H, DK, DV)
        ref, final = _naive(q[rows], k[rows], v[rows], g[rows], beta[rows], first)
        torch.testing.assert_close(out[rows], ref, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(states[slot], final.transpose(-1, -2), atol=2e-5, rtol=1e-4)
        start += n
    assert torch.equal(states[2], before[2])  # a slot no sequence names


def test_recurrent_decodes_continue_the_chunked_state() -> None:
    """Prefill 70 tokens (past one chunk), then decode 3 one by one = the naive recurrence
    over all 73; two sequences decode side by side, each on its slot."""
    ops = TorchLinearAttentionOps()
    q, k, v, g, beta = _inputs(73, seed=2)
    ref, final = _naive(q, k, v, g, beta, torch.zeros(H, DK, DV))
    states = torch.zeros(3, H, DV, DK)
    ops.chunk_gated_delta_rule(
        q[:70], k[:70], v[:70], g[:70], beta[:70], states, _seqs([70], [2], [False]), SCALE
    )
    states[0] = states[2]  # a second sequence in slot 0, same history
    slots = torch.tensor([2, 0], dtype=torch.int32)
    for t in range(70, 73):
        r = [t, t]
        got = ops.recurrent_gated_delta_rule(
            q[r], k[r], v[r], g[r], beta[r], states, slots, SCALE
        )
        torch.testing.assert_close(got, ref[r], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(states[2], final.transpose(-1, -2), atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(states[0], states[2])


def test_equal_channels_give_the_per_head_gate_and_channels_matter() -> None:
    ops = TorchLinearAttentionOps()
    q, k, v, g, beta = _inputs(CHUNK + 9, seed=3)
    per_head = g.mean(-1)
    seqs = _seqs([CHUNK + 9], [0], [False])
    gdn = ops.chunk_gated_delta_rule(
        q, k, v, per_head, beta, torch.zeros(1, H, DV, DK), seqs, SCALE
    )
    flat = ops.chunk_gated_delta_rule(
        q, k, v, per_head[..., None].expand_as(g).contiguous(), beta,
        torch.zeros(1, H, DV, DK), seqs, SCALE,
    )
    torch.testing.assert_close(flat, gdn, atol=2e-5, rtol=1e-4)
    vector = ops.chunk_gated_delta_rule(
        q, k, v, g, beta, torch.zeros(1, H, DV, DK), seqs, SCALE
    )
    assert (vector - gdn).abs().max() > 1e-2  # the per-channel rates change the output
