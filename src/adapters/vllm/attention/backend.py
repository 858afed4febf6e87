"""The attention backend class vLLM resolves by class path and by `get_name()`."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
from vllm.v1.attention.backend import AttentionBackend, AttentionType
from vllm.v1.kv_cache_layout import KVCacheLayout

if TYPE_CHECKING:
    from adapters.vllm.attention.impl import PagedAttentionImpl
    from adapters.vllm.attention.metadata import PagedMetadataBuilder

# The AttentionBackendEnum member this backend is registered under (registration.py):
# vLLM's Attention layer looks a backend up by its get_name() in that enum.
BACKEND_NAME = "ASCEND_PAGED"
BACKEND_PATH = "adapters.vllm.attention.backend.PagedAttentionBackend"


class PagedAttentionBackend(AttentionBackend):
    """Decoder self-attention (MHA/GQA) over a paged KV cache, one K|V page per block."""

    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes: ClassVar[list] = ["auto"]  # type: ignore[type-arg]
    forward_includes_kv_cache_update = True

    @staticmethod
    def get_name() -> str:
        return BACKEND_NAME

    @staticmethod
    def get_impl_cls() -> type[PagedAttentionImpl]:
        from adapters.vllm.attention.impl import PagedAttentionImpl

        return PagedAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[PagedMetadataBuilder]:
        from adapters.vllm.attention.metadata import PagedMetadataBuilder

        return PagedMetadataBuilder

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        # [block, token, head, K|V] per layer: the ops port's [num_blocks, block_size, Hk, D]
        # caches are then plain views (transpose + split), with no copy per step.
        return (KVCacheLayout.LBNHC,)

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER
