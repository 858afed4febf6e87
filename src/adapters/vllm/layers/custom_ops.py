"""Our layers for vLLM's RMSNorm, SiluAndMul and RotaryEmbedding, computing through the ops port
(M-RoPE and the vision towers' attention: vision.py).

Registered with `CustomOp.register_oot` (registration.py); vLLM then builds these
classes wherever a model asks for the originals, and calls `forward_oot` on an
out-of-tree platform.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.model_executor.layers.activation import SiluAndMul
from vllm.model_executor.layers.attention.mm_encoder_attention import MMEncoderAttention
from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import (
    UnquantizedFusedMoEMethod,
)
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding
from vllm.model_executor.layers.rotary_embedding.mrope import MRotaryEmbedding

from adapters.container import container
from adapters.vllm.layers.fused_moe import AscendUnquantizedFusedMoEMethod
from adapters.vllm.layers.vision import AscendMMEncoderAttention, AscendMRotaryEmbedding
from ports.ops import Ops


class _DeviceOps:
    """Mixin: the layer's ops port, asked of the container once, when the layer is built."""

    device_ops: Ops

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.device_ops = container().ops()


class AscendRMSNorm(_DeviceOps, RMSNorm):
    """RMSNorm, with and without the fused residual add."""

    def forward_oot(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if self.variance_size_override is not None or not self.has_weight:
            # Partial-variance and weightless norms are rare; vLLM's own code covers them.
            return self.forward_native(x, residual)
        if residual is None:
            return self.device_ops.rms_norm(x, self.weight.data, self.variance_epsilon)
        return self.device_ops.add_rms_norm(x, residual, self.weight.data, self.variance_epsilon)


class AscendSiluAndMul(_DeviceOps, SiluAndMul):
    def forward_oot(self, x: torch.Tensor) -> torch.Tensor:
        return self.device_ops.silu_and_mul(x)


class AscendRotaryEmbedding(_DeviceOps, RotaryEmbedding):
    def forward_oot(
        self,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if key is None:
            return self.forward_native(positions, query, key)
        cos_sin_cache = self._match_cos_sin_cache_dtype(query)
        return self.device_ops.rotary_embedding(
            positions, query, key, cos_sin_cache, self.head_size, self.rotary_dim,
            self.is_neox_style,
        )


# vLLM class -> our replacement; registration.py registers each pair once per process.
REPLACEMENTS: tuple[tuple[type, type], ...] = (
    (RMSNorm, AscendRMSNorm),
    (SiluAndMul, AscendSiluAndMul),
    (RotaryEmbedding, AscendRotaryEmbedding),
    (MRotaryEmbedding, AscendMRotaryEmbedding),
    (MMEncoderAttention, AscendMMEncoderAttention),
    (UnquantizedFusedMoEMethod, AscendUnquantizedFusedMoEMethod),
)
