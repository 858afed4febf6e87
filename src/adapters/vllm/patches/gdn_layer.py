"""Qwen3-Next's gated-delta-net layer and Kimi-Linear's KDA layer: ours (layers/gdn.py,
layers/kda.py) in place of vLLM's.

vLLM's QwenGatedDeltaNetAttention is a PluggableLayer: registered out of tree, vLLM builds
our subclass wherever a model asks for it. Done only for deployments of a hybrid model
(the layer's module pulls in vLLM's FLA sources, ~0.2 s of imports every other model
would pay for nothing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec


def register_layer(spec: PatchSpec) -> None:
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import (
        QwenGatedDeltaNetAttention,
    )

    from adapters.vllm.layers.gdn import AscendQwenGatedDeltaNetAttention

    name = QwenGatedDeltaNetAttention.__name__
    if op_registry_oot.get(name) is not AscendQwenGatedDeltaNetAttention:
        QwenGatedDeltaNetAttention.register_oot(AscendQwenGatedDeltaNetAttention)


def register_kda_layer(spec: PatchSpec) -> None:
    """Kimi-Linear's KDA layer (vLLM's KimiGatedDeltaNetAttention): ours (layers/kda.py)."""
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.layers.mamba.gdn.kimi_gdn_linear_attn import (
        KimiGatedDeltaNetAttention,
    )

    from adapters.vllm.layers.kda import AscendKimiDeltaAttention

    name = KimiGatedDeltaNetAttention.__name__
    if op_registry_oot.get(name) is not AscendKimiDeltaAttention:
        KimiGatedDeltaNetAttention.register_oot(AscendKimiDeltaAttention)
