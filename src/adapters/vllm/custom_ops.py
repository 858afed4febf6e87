"""Our layers for vLLM's RMSNorm, SiluAndMul and RotaryEmbedding, computing through the ops port.

Registered with `CustomOp.register_oot` (registration.py); vLLM then builds these
classes wherever a model asks for the originals, and calls `forward_oot` on an
out-of-tree platform.
"""

from __future__ import annotations

import functools

import torch
from vllm.model_executor.layers.activation import SiluAndMul
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

from adapters.vllm import wiring
from ports.ops import Ops


@functools.cache
def _ops() -> Ops:
    # Resolved once per process: the serving device does not change after startup.
    return wiring.device_ops(wiring.active_device_kind())


class AscendRMSNorm(RMSNorm):
    """RMSNorm, with and without the fused residual add."""

    def forward_oot(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if self.variance_size_override is not None or not self.has_weight:
            # Partial-variance and weightless norms are rare; vLLM's own code covers them.
            return self.forward_native(x, residual)
        if residual is None:
            return _ops().rms_norm(x, self.weight.data, self.variance_epsilon)
        return _ops().add_rms_norm(x, residual, self.weight.data, self.variance_epsilon)


class AscendSiluAndMul(SiluAndMul):
    def forward_oot(self, x: torch.Tensor) -> torch.Tensor:
        return _ops().silu_and_mul(x)


class AscendRotaryEmbedding(RotaryEmbedding):
    def forward_oot(
        self,
        positions: torch.Tensor,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if key is None:
            return self.forward_native(positions, query, key)
        cos_sin_cache = self._match_cos_sin_cache_dtype(query)
        return _ops().rotary_embedding(
            positions, query, key, cos_sin_cache, self.head_size, self.rotary_dim,
            self.is_neox_style,
        )


# vLLM class -> our replacement; registration.py registers each pair once per process.
REPLACEMENTS: tuple[tuple[type, type], ...] = (
    (RMSNorm, AscendRMSNorm),
    (SiluAndMul, AscendSiluAndMul),
    (RotaryEmbedding, AscendRotaryEmbedding),
)
