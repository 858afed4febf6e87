"""StateSequences for the linear-attention port's tests: sequence lengths, their state slots,
and which start from a saved state."""

from __future__ import annotations

import torch

from ports.linear_attention import StateSequences


def state_sequences(lens: list[int], slots: list[int], initial: list[bool]) -> StateSequences:
    qsl = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    return StateSequences(qsl, torch.tensor(slots, dtype=torch.int32), torch.tensor(initial))


def gated_delta_inputs(
    tokens: int, heads: tuple[int, int], dims: tuple[int, int], seed: int = 0
) -> tuple[torch.Tensor, ...]:
    """q, k (unit rows, [T, Hk, Dk]), v [T, Hv, Dv], a per-head log gate g <= 0 and beta in
    [0, 1) ([T, Hv]): the gated delta net's inputs, in float32."""
    (hk, hv), (dk, dv) = heads, dims
    gen = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(tokens, hk, dk, generator=gen), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(tokens, hk, dk, generator=gen), dim=-1)
    v = torch.randn(tokens, hv, dv, generator=gen)
    g = -torch.rand(tokens, hv, generator=gen)
    beta = torch.rand(tokens, hv, generator=gen)
    return q, k, v, g, beta
