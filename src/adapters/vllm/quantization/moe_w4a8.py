"""vLLM's MoE method for ModelSlim W4A8_DYNAMIC experts: int4 weights, per-token int8 activations.

The checkpoint holds, per expert e and projection p, `<prefix>.<e>.<p>.weight` (int8 [out / 2,
in]: two int4 values per byte along the output dimension, the even channel in the low
nibble), `weight_scale` and `weight_offset` (float32 [out, 1], offsets zero) and `scale_bias`
(float32: [out, 1] for gate_proj and up_proj; [out, 16] for down_proj, 16 partial sums over
equal slices of its input features, so a tensor-parallel rank sums the slices it holds), the
layout vllm-project/vllm-ascend reads (ModelSlim version 1.0.0, per-channel). At load the
int4 values are unpacked once and scale_bias is checked against them (it must be
8 * weight_scale * the row's sum, the correction the NPU's int4 grouped matmul adds); the
device's QuantMoeOps then holds them in its own layout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from adapters.torch.expert_weights import unpack_int4_pairs
from adapters.vllm.quantization.moe import _STEMS, AscendW8A8DynamicMoeMethod
from ascend_core.errors import QuantizationError
from ascend_core.quantization import QuantScheme
from ascend_core.quantization.modelslim import DESCRIPTION_FILE

if TYPE_CHECKING:
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    from ascend_core.quantization.tensors import SchemeTensor

_F32 = torch.float32
_BIAS_SLICES = 16  # down_proj's scale_bias columns, as ModelSlim writes them
_HELD = "ascend_int4_experts"  # layer attribute: the port's Int4Experts
# scale_bias vs 8 * scale * row sum: float32 sums in another order differ by far less.
_BIAS_RTOL = 1e-3


class AscendW4A8DynamicMoeMethod(AscendW8A8DynamicMoeMethod):
    """AscendW8A8DynamicMoeMethod's math with int4 expert weights: per token
    s = max|x| / 127, x_q = round(x / s); y = (x_q @ W_e^T) * weight_scale_e * s, the
    products exact in int32."""

    scheme = QuantScheme.W4A8_DYNAMIC

    @property
    def supports_eplb(self) -> bool:
        # The int4-packed experts' scales (as int64 bits) and down_proj's summed scale_bias
        # live in the port's Int4Experts, outside the parameters vLLM's rearrange moves.
        return False

    def create_weights(self, layer: RoutedExperts, num_experts: int, hidden_size: int,
                       intermediate_size_per_partition: int, params_dtype: torch.dtype,
                       **extra_weight_attrs: Any) -> None:
        tp = self.moe.tp_size
        prefix = self.layer_scheme.prefix
        if _BIAS_SLICES % tp or intermediate_size_per_partition % 2 or hidden_size % 2:
            raise QuantizationError(
                f"MoE layer {prefix}: W4A8_DYNAMIC experts with hidden size {hidden_size} and "
                f"{intermediate_size_per_partition} intermediate features per rank cannot be "
                f"split over {tp} tensor-parallel ranks (int4 pairs need even sizes, and "
                f"down_proj's scale_bias holds {_BIAS_SLICES} slices to share among ranks).",
                f"Use a tensor-parallel size dividing {_BIAS_SLICES}, or expert parallelism.",
            )
        self._hidden = hidden_size
        self._inter = intermediate_size_per_partition * tp  # the checkpoint's, unsharded
        super().create_weights(layer, num_experts, hidden_size, intermediate_size_per_partition,
                               params_dtype, **extra_weight_attrs)

    def _param_shape(self, stem: str, suffix: str, num_experts: int, out: int, inp: int
                     ) -> tuple[int, ...]:
        if suffix == "weight":
            return (num_experts, out // 2, inp)
        if suffix == "scale_bias" and stem == "w2":
            return (num_experts, out, _BIAS_SLICES)
        return (num_experts, out, 1)

    def _check_shape(self, layer: RoutedExperts, tensor: SchemeTensor, name: str, shard: str,
                     shape: tuple[int, ...]) -> None:
        out, inp = (self._hidden, self._inter) if shard == "w2" else (self._inter, self._hidden)
        expected = {
            "weight": (out // 2, inp),
            "scale_bias": (out, _BIAS_SLICES if shard == "w2" else 1),
        }.get(tensor.suffix)
        if expected is not None and shape != expected:
            raise QuantizationError(
                f"Checkpoint tensor {name} is {list(shape)}, but a W4A8_DYNAMIC expert "
                f"stores {tensor.suffix} as {list(expected)} ({tensor.meaning}).",
                "Re-export the experts with ModelSlim's W4A8_DYNAMIC (version 1.0.0, "
                f"per-channel), or check that {DESCRIPTION_FILE} names the scheme they were "
                "exported with.",
            )

    def process_weights_after_loading(self, layer: RoutedExperts) -> None:
        self._check_loaded(layer)
        experts = layer.w13_weight.shape[0]
        w13 = unpack_int4_pairs(layer.w13_weight.data)
        w2 = unpack_int4_pairs(layer.w2_weight.data)
        s13 = layer.w13_weight_scale.data.view(experts, -1)
        s2 = layer.w2_weight_scale.data.view(experts, -1)
        b13 = layer.w13_scale_bias.data.view(experts, -1)
        per_rank = _BIAS_SLICES // self.moe.tp_size
        start = self.moe.tp_rank * per_rank
        b2 = layer.w2_scale_bias.data[:, :, start:start + per_rank].sum(dim=-1)
        self._check_scale_bias(layer, "w13", w13, s13, b13)
        self._check_scale_bias(layer, "w2", w2, s2, b2)
        held = self.quant_moe.prepare_int4_experts(w13, s13, b13, w2, s2, b2)
        # The parameters now hold the device's layout (what the model's memory is).
        layer.w13_weight.data, layer.w2_weight.data = held.w13, held.w2
        setattr(layer, _HELD, held)

    def _check_scale_bias(self, layer: RoutedExperts, stem: str, values: torch.Tensor,
                          scale: torch.Tensor, bias: torch.Tensor) -> None:
        expected = 8.0 * scale.to(_F32) * values.to(_F32).sum(dim=-1)
        bound = 8.0 * scale.to(_F32).abs() * values.to(_F32).abs().sum(dim=-1)
        bad = (bias - expected).abs() > _BIAS_RTOL * bound + 1e-6
        if not bool(bad.any()):
            return
        local, row = (int(i) for i in bad.nonzero()[0])
        shards = _STEMS[stem]
        half = values.shape[1] // len(shards)
        shard, channel = shards[row // half], row % half
        name = self._checkpoint_name(layer, "scale_bias", shard,
                                     self.held_experts(layer)[local])
        raise QuantizationError(
            f"Checkpoint tensor {name} does not fit its weight: output channel {channel} "
            f"holds {float(bias[local, row]):.6g} (summed over this rank's slices), but "
            f"8 * weight_scale * the sum of that row's int4 weights is "
            f"{float(expected[local, row]):.6g}. The NPU's int4 grouped matmul adds "
            "scale_bias as its correction, so a wrong one gives wrong outputs.",
            "Re-export the experts with ModelSlim's W4A8_DYNAMIC, which writes scale_bias "
            "from the same int4 weights.",
        )

    def run_experts(
        self, layer: RoutedExperts, rows: torch.Tensor, group_sizes: torch.Tensor
    ) -> torch.Tensor:
        return self.quant_moe.grouped_mlp_w4a8_dynamic(rows, group_sizes, getattr(layer, _HELD))
