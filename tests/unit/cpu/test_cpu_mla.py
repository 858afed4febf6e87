"""CpuMlaOps against the naive loops of support.reference_moe_mla."""

from __future__ import annotations

import pytest
import torch

from adapters.cpu.mla import CpuMlaOps
from adapters.torch.attention_plan import build_attention_plan
from ports.mla import LatentCache
from ports.ops import AttentionPart, AttentionPlanNeeds
from support import reference_moe_mla as ref

OPS = CpuMlaOps()
TOL = {
    torch.float32: {"atol": 2e-5, "rtol": 1e-5},
    torch.bfloat16: {"atol": 1.6e-2, "rtol": 1.6e-2},
}
LATENT, ROPE, HEADS, BLOCK = 32, 16, 4, 16


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(11)


def _part(
    q_lens: list[int], seq_lens: list[int], table: torch.Tensor, needs: AttentionPlanNeeds
) -> AttentionPart:
    """The step's one part (all decodes or all prefills), as the metadata builder makes it."""
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    plan = build_attention_plan(qsl, torch.tensor(seq_lens, dtype=torch.int32), table, needs=needs)
    assert len(plan.parts) == 1
    return plan.parts[0]


def _table(seq_lens: list[int], num_blocks: int, gen: torch.Generator) -> torch.Tensor:
    """Each sequence its own blocks, in a shuffled order (paging is not contiguous)."""
    need = [-(-n // BLOCK) for n in seq_lens]
    perm = torch.randperm(num_blocks, generator=gen)
    table = torch.zeros(len(seq_lens), max(need), dtype=torch.int32)
    at = 0
    for b, n in enumerate(need):
        table[b, :n] = perm[at : at + n]
        at += n
    return table


def _cache(num_blocks: int, dtype: torch.dtype) -> LatentCache:
    """NaN everywhere, so a read of an unwritten row shows."""
    return LatentCache(
        torch.full((num_blocks, BLOCK, LATENT), float("nan"), dtype=dtype),
        torch.full((num_blocks, BLOCK, ROPE), float("nan"), dtype=dtype),
    )


def _dense(cache: LatentCache) -> torch.Tensor:
    """The planes side by side, [num_blocks, block_size, L + R], for the oracle."""
    return torch.cat((cache.latent, cache.rope), dim=-1)


def _slots(table: torch.Tensor, seq_lens: list[int]) -> torch.Tensor:
    return torch.tensor(
        [
            int(table[b, p // BLOCK]) * BLOCK + p % BLOCK
            for b, n in enumerate(seq_lens)
            for p in range(n)
        ]
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_write_then_gather_round_trips_and_skips_padding(
    dtype: torch.dtype, gen: torch.Generator
) -> None:
    seq_lens = [5, 40, 17]
    cache = _cache(12, dtype)
    table = _table(seq_lens, 12, gen)
    slots = _slots(table, seq_lens)
    n = slots.shape[0]
    latent = torch.randn(n + 3, LATENT, generator=gen)  # 3 padding tokens past the slots
    rope = torch.randn(n + 3, 1, ROPE, generator=gen)  # [T, 1, R] as vLLM's layer hands it
    slots_with_skip = slots.clone()
    slots_with_skip[1] = -1
    OPS.write_latent_cache(latent, rope, cache, slots_with_skip)
    got = OPS.gather_latent(cache, _part(seq_lens, seq_lens, table, OPS.plan_needs))
    want = torch.cat((latent[:n], rope[:n, 0]), dim=-1).to(dtype)
    assert got.dtype == dtype and got.shape == want.shape
    assert torch.isnan(got[1]).all()  # the skipped slot was not written
    keep = torch.arange(n) != 1
    assert torch.equal(got[keep], want[keep])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prefill_attention_matches_the_oracle(dtype: torch.dtype, gen: torch.Generator) -> None:
    # A fresh prefill, one with 30 cached tokens before its 7 new ones, and two tokens.
    q_lens, kv_lens = [12, 7, 2], [12, 37, 9]
    q = torch.randn(sum(q_lens), HEADS, 48, generator=gen).to(dtype)
    k = torch.randn(sum(kv_lens), HEADS, 48, generator=gen).to(dtype)
    v = torch.randn(sum(kv_lens), HEADS, 32, generator=gen).to(dtype)
    part = _part(q_lens, kv_lens, torch.zeros(3, 1, dtype=torch.int32), OPS.plan_needs)
    got = OPS.prefill_attention(q, k, v, part, 0.2)
    assert got.dtype == dtype and got.shape == (sum(q_lens), HEADS, 32)
    want = ref.prefill_attention(q, k, v, q_lens, kv_lens, 0.2)
    torch.testing.assert_close(got.double(), want, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_latent_decode_matches_the_oracle(dtype: torch.dtype, gen: torch.Generator) -> None:
    seq_lens = [1, 33, 70, 16]
    cache = _cache(20, dtype)
    table = _table(seq_lens, 20, gen)
    slots = _slots(table, seq_lens)
    OPS.write_latent_cache(
        torch.randn(slots.shape[0], LATENT, generator=gen),
        torch.randn(slots.shape[0], ROPE, generator=gen),
        cache,
        slots,
    )
    q_lat = torch.randn(4, HEADS, LATENT, generator=gen).to(dtype)
    q_rope = torch.randn(4, HEADS, ROPE, generator=gen).to(dtype)
    decode = _part([1] * 4, seq_lens, table, OPS.plan_needs)
    got = OPS.latent_decode(q_lat, q_rope, cache, decode, 0.15)
    assert got.dtype == dtype and got.shape == (4, HEADS, LATENT)
    want = ref.latent_decode(q_lat, q_rope, _dense(cache), table.tolist(), seq_lens, 0.15)
    torch.testing.assert_close(got.double(), want, **TOL[dtype])
