"""`--quantization ascend`: vLLM's QuantizationConfig over a ModelSlim description.

vLLM reads quant_model_description.json (get_config_filenames) and builds this config;
each layer's scheme comes from the core's per-layer lookup (scheme_for_layer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
from vllm.model_executor.layers.quantization.base_config import (
    QuantizationConfig,
    QuantizeMethodBase,
)
from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

from ascend_core.errors import QuantizationError

if TYPE_CHECKING:
    from ascend_core.quantization import ModelSlimDescription

# QuantMethod.ASCEND.value, spelled out: registration (every vLLM process) imports this
# module, and the core's quantization package (description parsing, detection, the
# per-layer lookup) is imported by the methods that use it, once a model is quantized.
# tests/integration/vllm/test_upstream_surface.py keeps the two equal.
METHOD_NAME = "ascend"


class AscendQuantConfig(QuantizationConfig):
    """ModelSlim exports: W8A8, W8A8_DYNAMIC, W8A16 and W4A8_DYNAMIC linear layers,
    W8A8_DYNAMIC and W4A8_DYNAMIC MoE experts, FLOAT where described so."""

    def __init__(self, description: ModelSlimDescription) -> None:
        super().__init__()
        self.description = description

    def get_name(self) -> Any:
        return METHOD_NAME

    def get_supported_act_dtypes(self) -> list[torch.dtype]:
        # The host serves float32 too, with the same integer math.
        return [torch.bfloat16, torch.float16, torch.float32]

    @classmethod
    def get_min_capability(cls) -> int:
        return 0  # no CUDA capability involved

    @staticmethod
    def get_config_filenames() -> list[str]:
        from ascend_core.quantization import DESCRIPTION_FILE

        return [DESCRIPTION_FILE]

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> AscendQuantConfig:
        from ascend_core.quantization import parse_description

        return cls(parse_description(config))

    def fused_shards(self) -> dict[str, tuple[str, ...]]:
        from ascend_core.quantization import DEFAULT_FUSED_SHARDS

        shards = dict(DEFAULT_FUSED_SHARDS)
        shards.update({k: tuple(v) for k, v in self.packed_modules_mapping.items()})
        return shards

    def get_quant_method(self, layer: torch.nn.Module, prefix: str) -> QuantizeMethodBase | None:
        from vllm.model_executor.layers.fused_moe import RoutedExperts

        from adapters.vllm.quantization.linear import LINEAR_METHODS
        from ascend_core.quantization import DESCRIPTION_FILE, QuantScheme, scheme_for_layer
        from ascend_core.quantization.modelslim_experts import scheme_for_experts
        from ascend_core.quantization.tensors import scheme_tensors

        if isinstance(layer, LinearBase):
            found = scheme_for_layer(self.description, prefix, self.fused_shards())
            if not found.quantized:
                return UnquantizedLinearMethod()
            scheme_tensors(found.scheme)  # refuses schemes with no linear method
            if found.scheme is QuantScheme.W4A8_DYNAMIC:
                from adapters.vllm.quantization.linear_w4a8 import (
                    AscendW4A8DynamicLinearMethod,
                )

                return AscendW4A8DynamicLinearMethod(found)
            return LINEAR_METHODS[found.scheme](found)
        if isinstance(layer, VocabParallelEmbedding):
            label = self.description.entries.get(f"{prefix}.weight", QuantScheme.FLOAT.value)
            if label.strip().upper() != QuantScheme.FLOAT.value:
                raise QuantizationError(
                    f"Layer {prefix}: {DESCRIPTION_FILE} says {prefix}.weight is {label}, "
                    "but embeddings and the LM head are served in float only.",
                    "Re-export with ModelSlim keeping the embedding and lm_head FLOAT.",
                )
            return None
        if isinstance(layer, RoutedExperts):
            from adapters.vllm.quantization.moe import AscendW8A8DynamicMoeMethod
            from adapters.vllm.quantization.moe_w4a8 import AscendW4A8DynamicMoeMethod

            moe = layer.moe_config
            projections = (layer.ckpt_gate_proj_name, layer.ckpt_up_proj_name,
                           layer.ckpt_down_proj_name)
            experts = scheme_for_experts(
                self.description, prefix, moe.num_logical_experts,
                tuple(p for p in projections if p is not None),
            )
            if experts.scheme is QuantScheme.W4A8_DYNAMIC:
                return AscendW4A8DynamicMoeMethod(moe, experts)
            if experts.quantized:
                return AscendW8A8DynamicMoeMethod(moe, experts)
        return None
