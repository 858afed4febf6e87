"""Exponential noise as a pure function of (seed, counter, token): no generator state.

vLLM samples a random row as argmax(probs / q) with q ~ Exp(1), drawn from the request's
own torch.Generator when it has a seed. A generator's state lives on the host and
advances with each draw, so a graph cannot replay it, and each seeded row costs launches
of its own. Here q is a hash of the request's seed, a counter (the position of the token
being sampled) and the token index: the same seed at the same position gives the same
noise in any batch, in any step shape, eager or replayed, on either device.

The hash is 32-bit integer mixing (the finaliser of MurmurHash3, a public-domain
constant pair) carried in int64 lanes, its products split in 16-bit halves so no value
leaves int64's range: every device computes the same bits. The top 24 bits of each hash
make a uniform u in (0, 1) exactly representable in float32; q = -log(u).
"""

from __future__ import annotations

import torch

_MASK = 0xFFFFFFFF
_M1 = 0x85EBCA6B
_M2 = 0xC2B2AE35
_TOKEN_SALT = 0x9E3779B9  # the golden ratio's bits, so token 0 does not hash to 0


def _mul32(x: torch.Tensor, constant: int) -> torch.Tensor:
    """(x * constant) mod 2**32 for int64 x in [0, 2**32): each product under 2**49."""
    low = x * (constant & 0xFFFF)
    high = ((x * (constant >> 16)) & 0xFFFF) << 16
    return (low + high) & _MASK


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finaliser, on int64 lanes holding 32-bit values."""
    x = x ^ (x >> 16)
    x = _mul32(x, _M1)
    x = x ^ (x >> 13)
    x = _mul32(x, _M2)
    return x ^ (x >> 16)


def row_keys(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """[B] int64 seeds (any 64-bit value) and [B] counters -> [B] 32-bit row keys."""
    seeds = seeds.to(torch.int64)
    low, high = seeds & _MASK, (seeds >> 32) & _MASK
    key = _mix32(low ^ _mix32(high))
    return _mix32(key ^ _mix32(counters.to(torch.int64) & _MASK))


def exponential_noise(
    seeds: torch.Tensor, counters: torch.Tensor, vocab: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """[B, vocab] Exp(1) noise on the seeds' device: row b from (seeds[b], counters[b])."""
    tokens = torch.arange(vocab, dtype=torch.int64, device=seeds.device)
    bits = _mix32(row_keys(seeds, counters).unsqueeze(1) ^ _mix32(tokens + _TOKEN_SALT))
    # 24 bits and a half: u in [2**-25, 1 - 2**-25], each value exact in float32.
    u = ((bits >> 8).to(torch.float32) + 0.5) * (1.0 / (1 << 24))
    return (-torch.log(u)).to(dtype)
