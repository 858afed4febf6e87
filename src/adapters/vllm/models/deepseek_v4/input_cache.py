"""Each V4 attention layer's paged cache: the layer's attention input per token.

The plugin's V4 layers cache what every one of their K = V rows, compressed rows and indexer
keys is computed from: the normed, hyper-connection-collapsed hidden state entering the
attention (hidden_size values a token, in the KV cache dtype: the model's unless
--kv-cache-dtype names bfloat16 or float16), in vLLM's paged blocks. A step
writes its tokens' rows at their slots, then each request reads its whole context back
through its block table (attention.py recomputes the window, the compressed rows and the
indexer keys from it). Every row depends only on the request's prefix, so chunked prefill
and prefix-cache hits need nothing more; the price is recomputing the compressed rows from
the context each step (the host reference's choice, not an NPU design).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from vllm.config import VllmConfig, get_current_vllm_config
from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
)
from vllm.v1.kv_cache_interface import KVCacheSpec, MLAAttentionSpec

BACKEND_NAME = "ASCEND_DSV4_INPUT_CACHE"


@dataclass
class InputCacheMetadata:
    """One step's view of the requests: where the new rows go and where each context is."""

    num_actual_tokens: int
    slot_mapping: torch.Tensor  # [num_actual_tokens] flat cache rows of the new tokens
    query_starts: list[int]  # [num_reqs + 1] offsets of each request's new tokens
    seq_lens: list[int]  # [num_reqs] context lengths, this step's tokens included
    block_table: torch.Tensor  # [num_reqs, max_blocks]
    block_size: int


class InputCacheMetadataBuilder(AttentionMetadataBuilder[InputCacheMetadata]):
    def __init__(self, kv_cache_spec: Any, layer_names: list[str], vllm_config: VllmConfig,
                 device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> InputCacheMetadata:
        cm = common_attn_metadata
        reqs, tokens = cm.num_reqs, cm.num_actual_tokens
        return InputCacheMetadata(
            num_actual_tokens=tokens,
            slot_mapping=cm.slot_mapping[:tokens],
            query_starts=cm.query_start_loc_cpu[: reqs + 1].tolist(),
            seq_lens=cm.seq_lens[:reqs].cpu().tolist(),
            block_table=cm.block_table_tensor[:reqs],
            block_size=self.block_size,
        )


class InputCacheBackend(AttentionBackend):
    supported_dtypes = [torch.float16, torch.bfloat16, torch.float32]

    @staticmethod
    def get_name() -> str:
        return BACKEND_NAME

    @staticmethod
    def get_impl_cls() -> Any:
        raise NotImplementedError("the V4 input cache has no attention impl: the layer attends")

    @staticmethod
    def get_builder_cls() -> type[InputCacheMetadataBuilder]:
        return InputCacheMetadataBuilder


class InputCache(nn.Module, AttentionLayerBase):
    """The paged per-token cache of one layer's attention inputs (no weights)."""

    def __init__(self, hidden_size: int, dtype: torch.dtype, prefix: str) -> None:
        super().__init__()
        self.hidden_size, self.dtype, self.prefix = hidden_size, dtype, prefix
        self.kv_cache = torch.tensor([])
        context = get_current_vllm_config().compilation_config.static_forward_context
        if prefix in context:
            raise ValueError(f"Duplicate layer name: {prefix}")
        context[prefix] = self

    def get_attn_backend(self) -> type[AttentionBackend]:
        return InputCacheBackend

    def get_kv_cache_spec(self, vllm_config: VllmConfig) -> KVCacheSpec:
        return MLAAttentionSpec(
            block_size=vllm_config.cache_config.block_size,
            num_kv_heads=1,
            max_tp_shards=1,
            head_size=self.hidden_size,
            dtype=self.dtype,
        )

    def rows(self) -> torch.Tensor:
        """The cache as [num_slots, hidden_size] (slot = block * block_size + offset): vLLM
        binds the logical [blocks, 1 head, block_size, hidden_size] page."""
        return self.kv_cache.view(-1, self.hidden_size)

    def store(self, x: torch.Tensor, meta: InputCacheMetadata) -> None:
        """Write this step's rows [num_actual_tokens, hidden] at their slots."""
        tokens = meta.num_actual_tokens
        self.rows()[meta.slot_mapping[:tokens].long()] = x[:tokens].to(self.kv_cache.dtype)

    def context(self, meta: InputCacheMetadata, request: int) -> tuple[torch.Tensor, int]:
        """(the request's context rows [L, hidden], how many of the last are this step's)."""
        rows = self.rows()
        length = meta.seq_lens[request]
        positions = torch.arange(length, device=rows.device)
        blocks = meta.block_table[request, positions // meta.block_size].long()
        slots = blocks * meta.block_size + positions % meta.block_size
        return rows[slots], meta.query_starts[request + 1] - meta.query_starts[request]
