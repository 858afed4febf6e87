"""PagedAttentionImpl makes each cache's K/V plane views once, and anew for another cache."""

from __future__ import annotations

import torch

from adapters.cpu.ops import CpuOps
from adapters.torch.attention_plan import build_attention_plan
from adapters.vllm.attention.impl import PagedAttentionImpl
from adapters.vllm.attention.metadata import PagedMetadata


def _step(kv_heads: int, head: int) -> tuple[PagedMetadata, torch.Tensor, torch.Tensor]:
    meta = build_attention_plan(
        torch.tensor([0, 1], dtype=torch.int32),
        torch.tensor([1], dtype=torch.int32),
        torch.tensor([[1]], dtype=torch.int32),
        needs=CpuOps.plan_needs,
    )
    gen = torch.Generator().manual_seed(0)
    key = torch.randn(1, kv_heads, head, generator=gen)
    value = torch.randn(1, kv_heads, head, generator=gen)
    return PagedMetadata(plan=meta, slot_mapping=torch.tensor([4]), ops=CpuOps()), key, value


def test_writes_land_in_the_cache_of_each_call() -> None:
    impl = PagedAttentionImpl(num_heads=2, head_size=4, scale=0.5, num_kv_heads=1)
    metadata, key, value = _step(1, 4)
    query = torch.randn(1, 2, 4)
    # [blocks, 2, block_size, Hk*D] with the K/V slot outermost in memory, as the backend
    # allocates it.
    caches = [torch.zeros(2, 2, 4, 4).permute(1, 0, 2, 3) for _ in range(2)]
    for kv_cache in (caches[0], caches[0], caches[1]):
        out = impl.forward(None, query, key, value, kv_cache, metadata, torch.empty(1, 2, 4))  # type: ignore[arg-type]
        # one cached token: attention returns its value for both query heads
        torch.testing.assert_close(out[0], value[0].expand(2, 4))
    for kv_cache in caches:
        assert torch.equal(kv_cache[1, 0, 0], key.reshape(-1))  # slot 4 = block 1, row 0
        assert torch.equal(kv_cache[1, 1, 0], value.reshape(-1))


def test_the_layers_window_and_sinks_reach_the_ops() -> None:
    """gpt-oss: a lone cached token of score s under sink logit k keeps e^s / (e^s + e^k)
    of its value, per head (a window of 1 still sees the token itself); sinks of another
    shape than [num_heads] are refused by name."""
    import math

    import pytest

    from ascend_core.errors import BackendSelectionError

    sinks = torch.tensor([0.0, 1.0])
    impl = PagedAttentionImpl(
        num_heads=2, head_size=4, scale=0.5, num_kv_heads=1, sliding_window=1, sinks=sinks
    )
    assert impl.sliding_window == 1
    metadata, key, value = _step(1, 4)
    kv_cache = torch.zeros(2, 2, 4, 4).permute(1, 0, 2, 3)
    query = torch.randn(1, 2, 4)
    out = impl.forward(None, query, key, value, kv_cache, metadata, torch.empty(1, 2, 4))  # type: ignore[arg-type]
    # e^s / (e^s + e^k) = sigmoid(s - k)
    score = (query[0] * key[0]).sum(-1) * 0.5
    keep = torch.sigmoid(score - sinks)
    torch.testing.assert_close(out[0], value[0].expand(2, 4) * keep[:, None])
    assert not math.isclose(float(keep[0]), float(keep[1]))
    with pytest.raises(BackendSelectionError, match="sinks of shape"):
        PagedAttentionImpl(num_heads=2, head_size=4, scale=0.5, sinks=torch.zeros(3))
