"""The attention backend class vLLM resolves by class path and by `get_name()`."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

import torch
from vllm.utils.torch_utils import get_dtype_size
from vllm.v1.attention.backend import AttentionBackend, AttentionType
from vllm.v1.kv_cache_layout import KVCacheLayout

from adapters.vllm.attention.names import BACKEND_NAME

if TYPE_CHECKING:
    from vllm.v1.kv_cache_interface import AttentionSpec

    from adapters.vllm.attention.impl import PagedAttentionImpl
    from adapters.vllm.attention.metadata import PagedMetadataBuilder

KV_PLANES = 2  # head slot 0 holds K, slot 1 holds V
PREFERRED_BLOCK_SIZE = 128


class PagedAttentionBackend(AttentionBackend):
    """Decoder self-attention (MHA/GQA) over a paged KV cache, K and V in separate planes.

    Each layer's cache is vLLM's logical [blocks, head slots, tokens, content] with two
    head slots (K, V) of content Hk*D, stored slot-outermost (LHBNC): the K plane and
    the V plane are then each a contiguous [num_blocks, block_size, Hk, D] tensor, the
    layout the ops port takes and npu_fused_infer_attention_score reads, with no copy.
    """

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
    def customize_spec(cls, spec: AttentionSpec) -> AttentionSpec:
        """Two head slots, K then V, each holding all KV heads of a token (Hk*D)."""
        if spec.state_content_bytes is not None:
            return spec
        return replace(
            spec,
            num_head_slots=KV_PLANES,
            state_content_bytes=spec.num_kv_heads * spec.head_size * get_dtype_size(spec.dtype),
        )

    @classmethod
    def supported_kv_cache_layouts(cls) -> tuple[KVCacheLayout, ...]:
        # Head slot outermost within the layer: the K and V planes each span all blocks.
        # Hybrid models (attention and mamba/GDN state sharing pages) need a block-compact
        # layout: there K and V alternate per block, and each plane is a strided view.
        return (KVCacheLayout.LHBNC, KVCacheLayout.LBHNC)

    @classmethod
    def get_preferred_block_size(cls, default_block_size: int) -> int:
        """128, the plan's block size on both devices (ascend_core.plan.block_size). vLLM
        asks only where it sizes the block itself (hybrid models, whose attention block
        it then raises to a multiple of this that holds a mamba/GDN state page)."""
        return PREFERRED_BLOCK_SIZE

    @classmethod
    def supports_sink(cls) -> bool:
        return True  # learned per-head sink logits (gpt-oss): the ops port's `sinks`

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True  # per-layer windows: the ops port's `window`

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER
