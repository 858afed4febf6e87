"""latent_planes: vLLM's one per-layer MLA allocation read as the ops port's two planes."""

from __future__ import annotations

import pytest
import torch

from adapters.vllm.attention.mla import latent_planes
from ascend_core.errors import ConfigError


def test_the_planes_are_contiguous_disjoint_and_cover_the_allocation() -> None:
    blocks, block_size, latent, rope = 5, 16, 32, 16
    kv_cache = torch.arange(blocks * block_size * (latent + rope), dtype=torch.float32)
    kv_cache = kv_cache.view(blocks, block_size, latent + rope)
    planes = latent_planes(kv_cache, latent)
    assert planes.latent.shape == (blocks, block_size, latent) and planes.latent.is_contiguous()
    assert planes.rope.shape == (blocks, block_size, rope) and planes.rope.is_contiguous()
    # Views of the same memory, latent plane first, then the rope plane, nothing shared.
    assert planes.latent.data_ptr() == kv_cache.data_ptr()
    covered = torch.cat((planes.latent.reshape(-1), planes.rope.reshape(-1)))
    assert torch.equal(covered, kv_cache.reshape(-1))
    planes.rope[2, 3] = -1.0  # a write through a plane lands in the allocation
    assert int((kv_cache == -1.0).sum()) == rope


def test_a_strided_cache_is_refused_with_the_layout_named() -> None:
    strided = torch.zeros(4, 16, 96)[:, :, :48]
    with pytest.raises(ConfigError, match="contiguous"):
        latent_planes(strided, 32)


def test_block_local_planes_keep_each_block_inside_its_own_page() -> None:
    """A hybrid model's MLA layer shares its allocation page by page with linear-attention
    state slots (vLLM's hybrid allocator), so block b's latent and rope rows must stay in
    page b: with the split planes they land in other pages (other requests' KDA states)."""
    blocks, block_size, latent, rope = 5, 16, 32, 16
    kv_cache = torch.zeros(blocks, block_size, latent + rope)
    planes = latent_planes(kv_cache, latent, block_local=True)
    assert planes.latent.shape == (blocks, block_size, latent)
    assert planes.rope.shape == (blocks, block_size, rope)
    planes.latent[3] = 1.0
    planes.rope[3] = 2.0
    pages = kv_cache.reshape(blocks, -1)
    assert int(pages[3].eq(0).sum()) == 0  # block 3 fills page 3 ...
    assert int(pages[[0, 1, 2, 4]].ne(0).sum()) == 0  # ... and touches no other page
    assert torch.equal(kv_cache[3, :, :latent], planes.latent[3])
    alloc = torch.zeros_like(kv_cache)
    latent_planes(alloc, latent).latent[3] = 1.0  # the contiguous planes, for contrast:
    assert bool(alloc.reshape(blocks, -1)[[0, 1, 2, 4]].ne(0).any())  # block 3 leaves page 3
