"""fp8 MoE experts (compressed-tensors and the fp8 method), served by dequantizing them at load.

vLLM builds CompressedTensorsW8A8Fp8MoEMethod for fp8 experts, whose kernels (Triton,
CUTLASS, DeepGEMM) neither the host nor an NPU runs; out of tree it selects none. The
patch `ct-fp8-moe-dequant` hands such layers this method instead when their weights have
a scale per output channel (FP8_DYNAMIC) or per [n, k] block (FP8_BLOCK) and their
activations are dynamic: the dense fp8 layers' path (adapters.vllm.quantization.fp8), per
expert. It creates the float8_e4m3fn weights and their scales as vLLM's method does (the
same loader fills them), and at load turns each expert's weight into the model dtype,

    per channel: w[e, o, i] = float32(q[e, o, i]) * scale[e, o]
    per block:   w[e, o, i] = float32(q[e, o, i]) * scale[e, o // block_n, i // block_k]

computed in float32 and cast once. The `fp8` method's checkpoints (DeepSeek-V3's and
Qwen3's official FP8 releases: weight_block_size, dynamic activations) store the same
block scales as `weight_scale_inv`; patch `fp8-moe-dequant` hands their experts this method
too, with that scale name (vLLM's Fp8MoEMethod names its parameters so, and the model's
expert mapping loads the checkpoint's tensors into them).

The layer then is a float MoE layer: the plugin's unquantized method's routing, experts
and combine on the device's MoeOps. Activations stay in the model dtype (weight-only, as
the dense fp8 layers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from vllm.model_executor.layers.fused_moe.config import FusedMoEConfig
from vllm.model_executor.layers.fused_moe.routed_experts import FusedMoeWeightScaleSupported
from vllm.model_executor.utils import replace_parameter, set_weight_attrs

from adapters.vllm.layers.fused_moe import AscendUnquantizedFusedMoEMethod
from adapters.vllm.quantization.fp8 import dequantize_fp8
from ascend_core.errors import QuantizationError

if TYPE_CHECKING:
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

_F32 = torch.float32
_FP8 = torch.float8_e4m3fn


class AscendFp8DequantMoeMethod(AscendUnquantizedFusedMoEMethod):
    """fp8 experts with a scale per output channel (`fp8_block` None) or per block;
    `scale_name`: the scales' parameter stem, `weight_scale` (compressed-tensors) or
    `weight_scale_inv` (the fp8 method's block scales)."""

    def __init__(self, moe: FusedMoEConfig, fp8_block: tuple[int, int] | None,
                 scale_name: str = "weight_scale") -> None:
        super().__init__(moe)
        self.fp8_block = fp8_block
        self.scale_name = scale_name

    @property
    def supports_eplb(self) -> bool:
        # Not proven with EPLB's rearrange (the plan refuses EPLB with fp8 experts first);
        # the unquantized method's True is not inherited.
        return False

    def create_weights(self, layer: RoutedExperts, num_experts: int, hidden_size: int,
                       intermediate_size_per_partition: int, params_dtype: torch.dtype,
                       **extra_weight_attrs: Any) -> None:
        inter = intermediate_size_per_partition
        layer.orig_dtype = params_dtype
        tp = int(getattr(layer, "tp_size", 1))
        if self.fp8_block is not None and (
                inter % self.fp8_block[0] or (tp > 1 and inter % self.fp8_block[1])):
            # The plan refuses the same before serve starts (ascend_core.quantization.fp8
            # expert_projections); vLLM's rule, validate_fp8_block_shape_moe.
            bn, bk = self.fp8_block
            raise QuantizationError(
                f"MoE layer {layer.layer_name}: its fp8 experts have [{bn}, {bk}] weight "
                f"blocks, but each expert's slice holds {inter} intermediate features on "
                "this rank, not a whole number of blocks; each block's scale would land on "
                "the wrong rows.",
                "Serve with a tensor-parallel size that keeps the experts' intermediate "
                "slice a whole number of blocks, or re-quantize with a smaller block "
                "(block_structure, weight_block_size) or with FP8_DYNAMIC (a scale per "
                "output channel).",
            )
        shapes = {"w13": (2 * inter, hidden_size), "w2": (hidden_size, inter)}
        strategy = (FusedMoeWeightScaleSupported.CHANNEL if self.fp8_block is None
                    else FusedMoeWeightScaleSupported.BLOCK)
        for stem, (out, inp) in shapes.items():
            weight = torch.nn.Parameter(torch.empty(num_experts, out, inp, dtype=_FP8),
                                        requires_grad=False)
            layer.register_parameter(f"{stem}_weight", weight)
            set_weight_attrs(weight, extra_weight_attrs)
            if self.fp8_block is None:
                scale_shape: tuple[int, ...] = (num_experts, out, 1)
            else:
                bn, bk = self.fp8_block
                scale_shape = (num_experts, -(-out // bn), -(-inp // bk))
            scale = torch.nn.Parameter(torch.ones(scale_shape, dtype=_F32), requires_grad=False)
            layer.register_parameter(f"{stem}_{self.scale_name}", scale)
            set_weight_attrs(scale, {**extra_weight_attrs, "quant_method": strategy.value})
        layer.w13_input_scale = None
        layer.w2_input_scale = None

    def process_weights_after_loading(self, layer: RoutedExperts) -> None:
        dtype = layer.orig_dtype
        for stem in ("w13", "w2"):
            weight = getattr(layer, f"{stem}_weight").data
            scale = getattr(layer, f"{stem}_{self.scale_name}").data
            dense = torch.stack([
                dequantize_fp8(weight[e], scale[e], self.fp8_block, dtype)
                for e in range(weight.shape[0])
            ])
            replace_parameter(layer, f"{stem}_weight", dense)
            delattr(layer, f"{stem}_{self.scale_name}")
        super().process_weights_after_loading(layer)
