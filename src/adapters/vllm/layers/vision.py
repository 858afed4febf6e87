"""Our layers for vLLM's MRotaryEmbedding and MMEncoderAttention, computing through the ops port.

Registered with `CustomOp.register_oot` like the other replacements (custom_ops.py); vLLM
builds them where a multimodal model asks for the originals and calls `forward_oot`.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any, ClassVar

import numpy as np
import torch
from vllm.model_executor.layers.attention.mm_encoder_attention import MMEncoderAttention
from vllm.model_executor.layers.rotary_embedding.mrope import MRotaryEmbedding

from adapters.container import container
from ports.ops import Ops

# Offset tensors made by maybe_recompute_cu_seqlens, with their host values: a tower's
# layers get the same few tensors (full and windowed attention) each pass, and the NPU's
# attention takes host lengths; recording them where vLLM still holds them on the host
# spares a device-to-host copy per layer. Kept for the last few tensors only.
_RECENT_OFFSETS = 8


class AscendMRotaryEmbedding(MRotaryEmbedding):
    """M-RoPE: [3, T] positions through the port's mrope, [T] (a text-only batch) through
    its rotary_embedding; offsets and key-less calls in vLLM's own torch code."""

    device_ops: Ops

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.device_ops = container().ops()

    def forward_oot(
        self,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        offsets: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if key is None or offsets is not None or (positions.ndim == 2 and not self.mrope_section):
            return self.forward_native(positions, query, key, offsets)
        cache = self._match_cos_sin_cache_dtype(query)
        if positions.ndim == 1:
            return self.device_ops.rotary_embedding(
                positions, query, key, cache, self.head_size, self.rotary_dim, self.is_neox_style
            )
        assert self.mrope_section is not None
        t, h, w = self.mrope_section
        return self.device_ops.mrope(
            positions, query, key, cache, self.head_size, self.rotary_dim, (t, h, w),
            self.mrope_interleaved, self.is_neox_style,
        )


class AscendMMEncoderAttention(MMEncoderAttention):
    """A vision tower's attention: every image (or window) one sequence, through the port's
    encoder_attention with the lengths as host ints."""

    device_ops: Ops
    _offsets: ClassVar[list[tuple[torch.Tensor, tuple[int, ...]]]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.device_ops = container().ops()

    @classmethod
    def maybe_recompute_cu_seqlens(
        cls,
        attn_backend: Any,
        cu_seqlens: np.ndarray,
        hidden_size: int,
        tp_size: int,
        device: torch.device,
        fp8_padded_hidden_size: int | None = None,
    ) -> torch.Tensor:
        """vLLM's device tensor, its host offsets recorded (see _RECENT_OFFSETS)."""
        tensor = super().maybe_recompute_cu_seqlens(
            attn_backend, cu_seqlens, hidden_size, tp_size, device,
            fp8_padded_hidden_size=fp8_padded_hidden_size,
        )
        if tensor.numel() == len(cu_seqlens):  # token offsets (a FlashInfer layout is not)
            cls._offsets = [*cls._offsets[1 - _RECENT_OFFSETS :], (tensor, tuple(
                int(x) for x in cu_seqlens))]
        return tensor

    def forward_oot(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        cu_seqlens: torch.Tensor | None = None,
        max_seqlen: torch.Tensor | None = None,
        sequence_lengths: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """query/key/value [b, s, heads * D] or [b, s, heads, D]; without cu_seqlens each of
        the b rows is one sequence, with it the b * s tokens split at its offsets."""
        bsz, q_len = query.shape[:2]
        q = query.reshape(bsz * q_len, self.num_heads, self.head_size)
        k = key.reshape(bsz * q_len, self.num_kv_heads, self.head_size)
        v = value.reshape(bsz * q_len, self.num_kv_heads, self.head_size)
        lens = (q_len,) * bsz if cu_seqlens is None else self._lengths(cu_seqlens)
        out = self.device_ops.encoder_attention(q, k, v, lens, self.scale)
        if query.dim() == 4:
            return out.view(bsz, q_len, self.num_heads, self.head_size)
        return out.view(bsz, q_len, -1)

    @classmethod
    def _lengths(cls, cu_seqlens: torch.Tensor) -> tuple[int, ...]:
        offsets = next((host for t, host in cls._offsets if t is cu_seqlens), None)
        if offsets is None:  # made elsewhere: read back (a device-to-host copy)
            offsets = tuple(int(x) for x in cu_seqlens.tolist())
        return tuple(b - a for a, b in pairwise(offsets))
