"""compressed-tensors W4A16 MoE experts (llm-compressor's pack-quantized int4) on the
Int4ExpertOps port of the serving device.

vLLM builds CompressedTensorsWNA16MoEMethod for such experts, whose backends (Marlin,
Triton, ...) neither device runs: out of tree it selects none ("No WNA16 MoE backend
supports the deployment configuration"). The patch `ct-wna16-moe-int4` hands 4-bit
pack-quantized experts with group-wise or per-channel scales (symmetric, or with packed
zero points) to this method instead. It creates the checkpoint's parameters as vLLM's
method does, N-first (the same expert loader fills them):

    w13_weight_packed int32 [E, 2I, H / 8], w2_weight_packed int32 [E, H, I / 8]
    w13_weight_scale [E, 2I, H / G], w2_weight_scale [E, H, I / G] (one group per channel)
    w13_weight_zero_point int32 [E, 2I / 8, H / G], w2_... [E, H / 8, I / G] (asymmetric)

At load the int4 values and zero points are unpacked (compressed-tensors' own
unpack_from_int32: eight fields per int32, low bits first, each stored + 8) and handed to
the port, which holds them in its device's layout. A device that holds them dense (the
host: each expert dequantized exactly, (q - z) * s in float32, rounded once to the model
dtype) gets the float MoE layer; otherwise (the NPU) the routing, permutation and combine
are AscendMoeMethod's and the experts the port's grouped_mlp_w4a16.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
from vllm.model_executor.layers.fused_moe.config import FusedMoEConfig
from vllm.model_executor.layers.fused_moe.routed_experts import FusedMoeWeightScaleSupported
from vllm.model_executor.utils import set_weight_attrs

from adapters.container import container
from adapters.vllm.layers.fused_moe import (
    AscendMoeMethod,
    AscendUnquantizedFusedMoEMethod,
    routed_num_experts,
    routing_of,
)
from ascend_core.errors import QuantizationError
from ports.quant_w4a16_moe import Int4ExpertOps, Int4ExpertWeights

if TYPE_CHECKING:
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

_BITS = 4
_PACK = 32 // _BITS
_HELD = "ascend_int4_experts"  # layer attribute: the port's Int4ExpertWeights
_STEMS = ("w13", "w2")


class AscendW4A16MoeMethod(AscendUnquantizedFusedMoEMethod):
    """Experts w = (q - z) * s per group of `group_size` input features (None: one scale
    per output channel); z = 0 when `symmetric`."""

    def __init__(self, moe: FusedMoEConfig, group_size: int | None, symmetric: bool) -> None:
        super().__init__(moe)
        self.group_size = group_size
        self.symmetric = symmetric
        self.int4_experts: Int4ExpertOps = container().int4_expert_ops()

    @property
    def supports_eplb(self) -> bool:
        # The experts the math reads are the port's held form, outside the parameters
        # vLLM's EPLB rearrange moves (the plan refuses EPLB with these experts first).
        return False

    def create_weights(self, layer: RoutedExperts, num_experts: int, hidden_size: int,
                       intermediate_size_per_partition: int, params_dtype: torch.dtype,
                       **extra_weight_attrs: Any) -> None:
        inter = intermediate_size_per_partition
        self._refuse_unservable(layer, num_experts, hidden_size, inter, params_dtype)
        self.params_dtype = params_dtype
        groups = {"w13": 1, "w2": 1} if self.group_size is None else {
            "w13": hidden_size // self.group_size, "w2": inter // self.group_size}
        strategy = (FusedMoeWeightScaleSupported.CHANNEL if self.group_size is None
                    else FusedMoeWeightScaleSupported.GROUP)
        attrs = {**extra_weight_attrs, "is_transposed": False, "quant_method": strategy.value}
        shapes = {"w13": (2 * inter, hidden_size), "w2": (hidden_size, inter)}
        for stem, (out, inp) in shapes.items():
            g = groups[stem]
            tensors: dict[str, torch.Tensor] = {
                "weight_packed": torch.empty(num_experts, out, inp // _PACK, dtype=torch.int32),
                "weight_scale": torch.ones(num_experts, out, g, dtype=params_dtype),
                # compressed-tensors' [out, in] of each expert, read by the loader only.
                "weight_shape": torch.empty(num_experts, 2),
            }
            if not self.symmetric:
                tensors["weight_zero_point"] = torch.zeros(num_experts, out // _PACK, g,
                                                           dtype=torch.int32)
            for suffix, data in tensors.items():
                param = torch.nn.Parameter(data, requires_grad=False)
                layer.register_parameter(f"{stem}_{suffix}", param)
                set_weight_attrs(param, attrs)

    def _refuse_unservable(self, layer: RoutedExperts, num_experts: int, hidden: int,
                           inter: int, dtype: torch.dtype) -> None:
        """Before any weight loads: what the device's ops or the packed layout cannot take."""
        reason = self.int4_experts.int4_experts_refusal(
            num_experts, hidden, inter, self.group_size, dtype, bool(self.moe.use_ep))
        if reason is None and self.moe.has_bias:
            reason = "the W4A16 experts are served without expert biases"
        if reason is None and not self.symmetric and (inter % _PACK or hidden % _PACK):
            # gate_proj's and up_proj's zero points are packed apart, each [I / 8, groups]
            # in the files: a rank's slice of each must be whole int32 rows.
            reason = (f"zero points are packed {_PACK} per int32 along the outputs, and "
                      f"the {inter} gate (and up) outputs or {hidden} down outputs per rank "
                      f"are not a multiple of {_PACK}")
        if reason is None:
            return
        groups = ("one scale per output channel" if self.group_size is None
                  else f"groups of {self.group_size}")
        raise QuantizationError(
            f"MoE layer {layer.layer_name}: its compressed-tensors W4A16 experts "
            f"({num_experts} on this rank, hidden size {hidden}, {inter} intermediate "
            f"features per rank, {groups}, "
            f"{'symmetric' if self.symmetric else 'with zero points'}) cannot be served on "
            f"this device: {reason}.",
            "Re-quantize the experts with llm-compressor using a group size that divides "
            "the hidden and the per-rank intermediate sizes (or per channel), serve a "
            "bfloat16/float16 model on the NPU, or keep the experts unquantized "
            "(llm-compressor's ignore list, e.g. \"re:.*mlp.experts.*\").",
        )

    def process_weights_after_loading(self, layer: RoutedExperts) -> None:
        values, scales, zeros = {}, {}, {}
        for stem in _STEMS:
            packed = getattr(layer, f"{stem}_weight_packed").data
            experts, out, words = packed.shape
            values[stem] = unpack_from_int32(packed, _BITS,
                                             torch.Size([experts, out, words * _PACK]))
            scales[stem] = getattr(layer, f"{stem}_weight_scale").data
            zeros[stem] = None if self.symmetric else _unpack_zero_points(
                getattr(layer, f"{stem}_weight_zero_point").data, out)
        held = self.int4_experts.prepare_int4_experts(
            values["w13"], scales["w13"], zeros["w13"], values["w2"], scales["w2"],
            zeros["w2"], self.group_size, self.params_dtype)
        for stem in _STEMS:
            for suffix in ("weight_packed", "weight_scale", "weight_shape", "weight_zero_point"):
                if hasattr(layer, f"{stem}_{suffix}"):
                    delattr(layer, f"{stem}_{suffix}")
            # The device's layout under vLLM's names (what the model's memory is).
            weight = held.w13 if stem == "w13" else held.w2
            layer.register_parameter(f"{stem}_weight",
                                     torch.nn.Parameter(weight, requires_grad=False))
        setattr(layer, _HELD, held)
        if held.dense:  # float experts: the unquantized method's checks, graphs and exchange
            super().process_weights_after_loading(layer)
            return
        self.routing_rule = routing_of(layer)
        dtype = str(layer.moe_config.in_dtype).removeprefix("torch.")
        self.moe_ops.check(self.routing_rule, routed_num_experts(layer), dtype)

    def routed_experts(
        self, layer: RoutedExperts, x: torch.Tensor, local_ids: torch.Tensor,
        weights: torch.Tensor,
    ) -> torch.Tensor:
        held: Int4ExpertWeights = getattr(layer, _HELD)
        if held.dense:
            return super().routed_experts(layer, x, local_ids, weights)
        return AscendMoeMethod.routed_experts(self, layer, x, local_ids, weights)

    def run_experts(
        self, layer: RoutedExperts, rows: torch.Tensor, group_sizes: torch.Tensor
    ) -> torch.Tensor:
        return self.int4_experts.grouped_mlp_w4a16(rows, group_sizes, getattr(layer, _HELD))


def _unpack_zero_points(packed: torch.Tensor, out: int) -> torch.Tensor:
    """int32 [E, out / 8, groups], packed along the outputs -> int8 [E, out, groups]."""
    experts, _, groups = packed.shape
    return unpack_from_int32(packed, _BITS, torch.Size([experts, out, groups]), packed_dim=0)
