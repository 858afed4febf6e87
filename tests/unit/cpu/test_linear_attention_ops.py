"""The linear-attention port in torch (adapters/torch/linear_attention.py), on host tensors:
the chunked and the recurrent delta rule agree with each other (transformers' Qwen3-Next
reference: tests/integration/test_linear_attention_hf.py), state slots carry sequences
across calls, and the convolution continues from its slot as one long sequence would."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from adapters.torch.linear_attention import TorchLinearAttentionOps
from support.state_sequences import gated_delta_inputs
from support.state_sequences import state_sequences as _seqs

HK, HV, DK, DV, W, D = 2, 4, 16, 8, 4, 24


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _inputs(tokens: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    return gated_delta_inputs(tokens, (HK, HV), (DK, DV), seed)


def test_recurrent_steps_continue_the_chunked_state() -> None:
    """Prefill 40 tokens then decode 3 one by one = the chunked form over all 43."""
    ops = TorchLinearAttentionOps()
    q, k, v, g, beta = _inputs(43, seed=2)
    whole = torch.zeros(2, HV, DV, DK)
    expected = ops.chunk_gated_delta_rule(
        q, k, v, g, beta, whole, _seqs([43], [1], [False]), 0.25
    )
    states = torch.zeros(2, HV, DV, DK)
    ops.chunk_gated_delta_rule(
        q[:40], k[:40], v[:40], g[:40], beta[:40], states, _seqs([40], [1], [False]), 0.25
    )
    slot = torch.tensor([1], dtype=torch.int32)
    for t in range(40, 43):
        r = slice(t, t + 1)
        got = ops.recurrent_gated_delta_rule(
            q[r], k[r], v[r], g[r], beta[r], states, slot, 0.25
        )
        torch.testing.assert_close(got, expected[r], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(states[1], whole[1], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("split", [1, 2, 6])
def test_convolution_continues_from_its_slot(split: int) -> None:
    """A sequence cut in two (prefill, then prefill again or decodes) gives the
    convolution of the whole, as transformers computes it (silu after)."""
    ops = TorchLinearAttentionOps()
    gen = _gen(4)
    x = torch.randn(9, D, generator=gen)
    weight = torch.randn(D, W, generator=gen)
    expected = F.silu(
        F.conv1d(x.T[None], weight[:, None], padding=W - 1, groups=D)[0, :, :9].T
    )
    states = torch.randn(3, W - 1, D, generator=gen)
    other = states[0].clone()
    first = ops.causal_conv1d(x[:split], weight, states, _seqs([split], [2], [False]))
    rest = []
    for t in range(split, 9):
        rest.append(ops.causal_conv1d_update(
            x[t:t + 1], weight, states, torch.tensor([2], dtype=torch.int32)
        ))
    torch.testing.assert_close(torch.cat([first, *rest]), expected, atol=1e-5, rtol=1e-5)
    states2 = torch.randn(3, W - 1, D, generator=gen)
    ops.causal_conv1d(x[:split], weight, states2, _seqs([split], [1], [False]))
    again = ops.causal_conv1d(x[split:], weight, states2, _seqs([9 - split], [1], [True]))
    torch.testing.assert_close(again, expected[split:], atol=1e-5, rtol=1e-5)
    assert torch.equal(states[0], other)


def test_convolution_batches_sequences_each_on_its_own_slot() -> None:
    ops = TorchLinearAttentionOps()
    gen = _gen(5)
    x = torch.randn(11, D, generator=gen)
    weight = torch.randn(D, W, generator=gen)
    states = torch.randn(4, W - 1, D, generator=gen)
    alone = states.clone()
    batched = ops.causal_conv1d(x, weight, states, _seqs([2, 8, 1], [3, 0, 2], [True, False, True]))
    parts = []
    for rows, slot, init in ((slice(0, 2), 3, True), (slice(2, 10), 0, False),
                             (slice(10, 11), 2, True)):
        parts.append(ops.causal_conv1d(
            x[rows], weight, alone, _seqs([rows.stop - rows.start], [slot], [init])
        ))
    torch.testing.assert_close(batched, torch.cat(parts))
    torch.testing.assert_close(states, alone)
