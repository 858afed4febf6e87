"""The attention computation of one layer: write this step's K/V, attend over the cache."""

from __future__ import annotations

import torch
from vllm.v1.attention.backend import AttentionImpl, AttentionLayer, AttentionType

from adapters.container import container
from adapters.vllm.attention.metadata import PagedMetadata
from ascend_core.errors import BackendSelectionError, refuse_unsupported


class PagedAttentionImpl(AttentionImpl[PagedMetadata]):
    """Causal self-attention of a decoder layer through the device's ops port."""

    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int | None = None,
        alibi_slopes: list[float] | None = None,
        sliding_window: int | None = None,
        kv_cache_dtype: str = "auto",
        logits_soft_cap: float | None = None,
        attn_type: str = AttentionType.DECODER,
        kv_sharing_target_layer_name: str | None = None,
        sinks: torch.Tensor | None = None,
        **_: object,
    ) -> None:
        unsupported = {
            "alibi_slopes": alibi_slopes is not None,
            "logits_soft_cap": bool(logits_soft_cap),
            f"attn_type={attn_type}": attn_type != AttentionType.DECODER,
            f"kv_cache_dtype={kv_cache_dtype}": kv_cache_dtype != "auto",
        }
        refuse_unsupported(
            unsupported,
            "The Ascend paged attention backend does not support",
            "serve a standard decoder (MHA/GQA) model without these features",
            BackendSelectionError,
        )
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        # gpt-oss: this layer's window (vLLM passes the per-layer one, None on full
        # layers) and its [Hq] sink logits, the model's parameter (loaded after this).
        self.sliding_window = sliding_window
        if sinks is not None and sinks.shape != (num_heads,):
            raise BackendSelectionError(
                f"attention sinks of shape {tuple(sinks.shape)} for {num_heads} query heads: "
                "the paged backend takes one sink logit per query head of this rank.",
                "check the model's sinks parameter (one per attention head, split by TP)",
            )
        self.sinks = sinks
        self.ops = container().ops()
        # (kv_cache, key plane, value plane): vLLM hands the same cache tensor every step,
        # so its plane views are made once, not in every layer of every step.
        self._planes: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def forward(
        self,
        layer: AttentionLayer,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: PagedMetadata,
        output: torch.Tensor,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if attn_metadata is None:
            # Profiling run: vLLM only measures memory, there is no cache yet.
            return output.fill_(0)
        # [blocks, 2, block_size, Hk*D] with the K/V slot outermost in memory (backend.py):
        # each plane is a contiguous [num_blocks, block_size, Hk, D] view, no copy.
        planes = self._planes
        if planes is None or planes[0] is not kv_cache:
            blocks, _, block_size, _ = kv_cache.shape
            key_plane, value_plane = (
                plane.view(blocks, block_size, self.num_kv_heads, self.head_size)
                for plane in kv_cache.unbind(1)
            )
            planes = self._planes = (kv_cache, key_plane, value_plane)
        _, key_cache, value_cache = planes
        if self.kv_sharing_target_layer_name is None and key is not None:
            self.ops.write_kv_cache(key, value, key_cache, value_cache, attn_metadata.slot_mapping)
        return self.ops.paged_attention(
            query,
            key_cache,
            value_cache,
            attn_metadata.plan,
            self.scale,
            output,
            window=self.sliding_window,
            sinks=self.sinks,
        )
