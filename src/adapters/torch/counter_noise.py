"""Exponential noise as a pure function of (seed, counter, token): no generator state.

vLLM samples a random row as argmax(probs / q) with q ~ Exp(1), drawn from the request's
own torch.Generator when it has a seed. A generator's state lives on the host and
advances with each draw, so a graph cannot replay it, and each seeded row costs launches
of its own. Here q is a hash of a row key (from the request's seed and a counter: the
position of the token being sampled) and the token index: the same seed at the same
position gives the same noise in any batch, in any step shape, eager or replayed, on
either device.

The mixing is a 32-bit integer hash (xor-shift by 16 and multiply by 0x45d9f3b, twice,
then a last xor-shift: a published public-domain integer hash) carried in int64 lanes:
the multiplier is under 2**31, so no product leaves int64's range and every device
computes the same bits. The top 24 bits of each hash make a uniform u in (0, 1), exact
in float32; q = -log(u).
"""

from __future__ import annotations

import torch

_MASK = 0xFFFFFFFF
_MULTIPLIER = 0x45D9F3B
_SEED_SALT = 0x9E3779B9  # the golden ratio's bits: a seed's halves hash apart
_TOKEN_SALT = 0x7F4A7C15  # so token 0 does not hash to 0


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """The 32-bit hash, on int64 lanes holding 32-bit values (each product < 2**59)."""
    x = ((x >> 16) ^ x) * _MULTIPLIER & _MASK
    x = ((x >> 16) ^ x) * _MULTIPLIER & _MASK
    return (x >> 16) ^ x


def row_keys(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """[B] int64 seeds (any 64-bit value) and [B] counters -> [B] 32-bit row keys (int64),
    on their device: a few launches on B values (the host's tensors for an eager step)."""
    seeds = seeds.to(torch.int64)
    low, high = seeds & _MASK, (seeds >> 32) & _MASK
    key = _mix32(low ^ _mix32(high ^ _SEED_SALT))
    return _mix32(key ^ _mix32(counters.to(torch.int64) & _MASK))


def exponential_noise(keys: torch.Tensor, vocab: int) -> torch.Tensor:
    """[B, vocab] float32 Exp(1) noise on the keys' device: row b from `keys[b]`
    (row_keys), token t from the hash of (keys[b], t)."""
    tokens = _mix32(torch.arange(vocab, dtype=torch.int64, device=keys.device) + _TOKEN_SALT)
    bits = _mix32(keys.to(torch.int64).unsqueeze(1) ^ tokens)
    # 24 bits and a half: u in [2**-25, 1 - 2**-25], each value exact in float32.
    u = ((bits >> 8).to(torch.float32) + 0.5) * (1.0 / (1 << 24))
    return torch.log(u).neg_()
