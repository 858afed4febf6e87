"""The linear-attention port's chunked gated delta rule (adapters/torch/linear_attention.py)
against transformers' Qwen3-Next reference functions, on host tensors. Integration: it
imports transformers, which the unit layer keeps out of its collection."""

from __future__ import annotations

import torch

from adapters.torch.linear_attention import TorchLinearAttentionOps
from support.state_sequences import gated_delta_inputs
from support.state_sequences import state_sequences as _seqs

HK, HV, DK, DV, W, D = 2, 4, 16, 8, 4, 24


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _inputs(tokens: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    return gated_delta_inputs(tokens, (HK, HV), (DK, DV), seed)


def test_chunked_equals_transformers_reference_and_keeps_other_slots() -> None:
    from transformers.models.qwen3_next import modeling_qwen3_next as hf

    ops = TorchLinearAttentionOps()
    lens = [5, 70, 130]  # one chunk, across a chunk boundary, three chunks
    q, k, v, g, beta = _inputs(sum(lens))
    states = torch.randn(4, HV, DV, DK, generator=_gen(1))
    before = states.clone()
    out = ops.chunk_gated_delta_rule(
        q, k, v, g, beta, states, _seqs(lens, [3, 0, 1], [False, True, False]), DK**-0.5
    )
    start = 0
    for n, slot, init in zip(lens, [3, 0, 1], [False, True, False], strict=True):
        rows = slice(start, start + n)
        ref, final = hf.torch_chunk_gated_delta_rule(
            q[None, rows].repeat_interleave(2, 2), k[None, rows].repeat_interleave(2, 2),
            v[None, rows], g[None, rows], beta[None, rows],
            initial_state=before[slot].transpose(-1, -2)[None] if init else None,
            output_final_state=True,
        )
        torch.testing.assert_close(out[rows], ref[0], atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(states[slot], final[0].transpose(-1, -2), atol=2e-5, rtol=1e-4)
        start += n
    assert torch.equal(states[2], before[2])  # a slot no sequence names
