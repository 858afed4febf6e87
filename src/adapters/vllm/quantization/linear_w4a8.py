"""vLLM's linear method for ModelSlim W4A8_DYNAMIC layers: int4 weights with a scale per
output channel, activations quantized to int8 per token.

The checkpoint holds, per layer (per shard of a fused one), `weight` int8 [out / 2, in]
(two int4 values per byte along the outputs, the even channel in the low nibble),
`weight_scale` and `weight_offset` (zeros) [out, 1] and `scale_bias` float32 (8 *
weight_scale * the int4 row's sum: [out, 1] for column-parallel layers, [out, 16] for
row-parallel ones, 16 partial sums over equal slices of the inputs, so a tensor-parallel
rank sums the slices of its input shard), the per-channel layout of ModelSlim version
1.0.0 that vllm-project/vllm-ascend reads. vLLM's loaders shard the packed weight through
its `packed_dim` / `packed_factor`. At load the values are unpacked once and scale_bias is
checked against them; the device's W4A8LinearOps then holds them in its own layout.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.model_executor.layers.linear import QKVParallelLinear, RowParallelLinear
from vllm.model_executor.utils import set_weight_attrs

from adapters.container import container
from adapters.torch.expert_weights import unpack_int4_pairs
from adapters.vllm.quantization.linear import Int8LinearMethod, _shard_ids
from ascend_core.errors import QuantizationError
from ascend_core.quantization import LayerScheme, QuantScheme
from ascend_core.quantization.modelslim import DESCRIPTION_FILE
from ascend_core.quantization.tensors import SchemeTensor, scheme_tensors
from ascend_core.quantization.w4a8 import PAIR as _PAIR
from ascend_core.quantization.w4a8 import ROW_SLICES as _BIAS_SLICES
from ports.quant_w4a8 import W4A8LinearOps

_F32 = torch.float32
_HELD = "ascend_w4a8_weight"  # layer attribute: the port's W4A8Weight
_LOADED = "_ascend_loaded"
# scale_bias vs 8 * scale * row sum: float32 sums in another order differ by far less.
_BIAS_RTOL = 1e-3


def _full_out(layer: torch.nn.Module, shard: Any) -> int:
    """The output features of one shard of the layer in the checkpoint (all ranks)."""
    if shard is None:
        return int(layer.output_size)
    if isinstance(layer, QKVParallelLinear):
        heads = {"q": layer.total_num_heads, "k": layer.total_num_kv_heads,
                 "v": layer.total_num_kv_heads}[shard]
        return int(heads * (layer.v_head_size if shard == "v" else layer.head_size))
    return int(layer.output_sizes[int(shard)])


class AscendW4A8DynamicLinearMethod(Int8LinearMethod):
    """Per token s = max|x| / 127, x_q = round(x / s); y = (x_q @ q^T) * weight_scale * s,
    the int8 x int4 products exact in int32 (ports/quant_w4a8.py)."""

    scheme = QuantScheme.W4A8_DYNAMIC

    def __init__(self, layer_scheme: LayerScheme) -> None:
        super().__init__(layer_scheme)
        self.w4a8: W4A8LinearOps = container().w4a8_linear_ops()

    def create_weights(
        self,
        layer: torch.nn.Module,
        input_size_per_partition: int,
        output_partition_sizes: list[int],
        input_size: int,
        output_size: int,
        params_dtype: torch.dtype,
        **extra_weight_attrs: Any,
    ) -> None:
        n, k = sum(output_partition_sizes), input_size_per_partition
        row = isinstance(layer, RowParallelLinear)
        tp = int(getattr(layer, "tp_size", 1)) if row else 1
        self._refuse_sizes(output_partition_sizes, k, row, tp)
        loader = extra_weight_attrs["weight_loader"]
        object.__setattr__(layer, _LOADED, {})
        layer.ascend_shards = _shard_ids(layer, len(output_partition_sizes))
        layer.ascend_partition_sizes = tuple(output_partition_sizes)
        for tensor in scheme_tensors(self.scheme):
            attrs: dict[str, Any] = {"output_dim": 0}
            if tensor.suffix == "weight":
                data = torch.empty(n // _PAIR, k, dtype=torch.int8)
                attrs.update(input_dim=1, packed_dim=0, packed_factor=_PAIR)
            elif tensor.suffix == "scale_bias" and row:
                data = torch.empty(n, _BIAS_SLICES, dtype=_F32)  # every rank reads all 16
            else:
                data = torch.empty(n, 1, dtype=_F32)
            param = torch.nn.Parameter(data, requires_grad=False)
            attrs["weight_loader"] = self._checked(layer, tensor, loader)
            set_weight_attrs(param, attrs)
            layer.register_parameter(tensor.suffix, param)

    def _refuse_sizes(self, partitions: list[int], k: int, row: bool, tp: int) -> None:
        prefix = self.layer_scheme.prefix
        problem = None
        if any(p % _PAIR for p in partitions):
            problem = (f"its output features per rank ({', '.join(map(str, partitions))}) "
                       "are not all even, and each byte holds two output channels")
        elif row and _BIAS_SLICES % tp:
            problem = (f"its scale_bias holds {_BIAS_SLICES} slices of the inputs, which "
                       f"{tp} tensor-parallel ranks cannot share")
        else:
            problem = self.w4a8.w4a8_refusal(sum(partitions), k)
        if problem is not None:
            raise QuantizationError(
                f"Layer {prefix}: a W4A8_DYNAMIC linear layer cannot be served here: "
                f"{problem}.",
                f"Use a tensor-parallel size dividing {_BIAS_SLICES} that keeps the layer's "
                "slices even, or re-export the layer with ModelSlim as W8A8_DYNAMIC.",
            )

    def _checked(self, layer: torch.nn.Module, tensor: SchemeTensor, loader: Any) -> Any:
        checked = super()._checked(layer, tensor, loader)

        def load(param: torch.nn.Parameter, loaded: torch.Tensor, *args: Any) -> Any:
            shard = args[0] if args else None
            self._check_shape(layer, tensor, shard, loaded, param)
            return checked(param, loaded, *args)

        return load

    def _check_shape(self, layer: torch.nn.Module, tensor: SchemeTensor, shard: Any,
                     loaded: torch.Tensor, param: torch.Tensor) -> None:
        out = _full_out(layer, shard)
        inputs = int(layer.input_size)
        expected = {
            "weight": (out // _PAIR, inputs),
            "scale_bias": (out, int(param.shape[1])),
        }.get(tensor.suffix)
        if expected is None or tuple(loaded.shape) == expected:
            return
        name = self._checkpoint_name(tensor.suffix, shard)
        raise QuantizationError(
            f"Checkpoint tensor {name} is {list(loaded.shape)}, but a W4A8_DYNAMIC "
            f"{'row' if param.shape[1] == _BIAS_SLICES else 'column'}-parallel layer "
            f"stores {tensor.suffix} as {list(expected)} ({tensor.meaning}).",
            "Re-export with ModelSlim's per-channel W4A8_DYNAMIC (version 1.0.0, which packs "
            f"int4 pairs and writes scale_bias), or check that {DESCRIPTION_FILE} names the "
            "scheme the layer was exported with.",
        )

    def finish(self, layer: torch.nn.Module) -> None:
        if torch.any(layer.weight_offset.data != 0):
            raise QuantizationError(
                f"Layer {self.layer_scheme.prefix}: weight_offset is not all zeros; "
                "W4A8_DYNAMIC weights are served symmetric only.",
                "Re-export the model with ModelSlim's symmetric W4A8_DYNAMIC weights.",
            )

    def prepare(self, layer: torch.nn.Module) -> None:
        values = unpack_int4_pairs(layer.weight.data)
        scale = layer.weight_scale.data.to(_F32).reshape(-1)
        bias = layer.scale_bias.data
        if bias.shape[1] == _BIAS_SLICES:
            per_rank = _BIAS_SLICES // int(layer.tp_size)
            start = int(layer.tp_rank) * per_rank
            bias = bias[:, start:start + per_rank].sum(dim=-1)
        bias = bias.reshape(-1)
        self._check_scale_bias(layer, values, scale, bias)
        held = self.w4a8.prepare_w4a8(values, scale, bias)
        # The parameters now hold the device's layout (what the model's memory is).
        layer.weight.data, layer.weight_scale.data = held.weight, held.scale
        layer.scale_bias.data = held.scale_bias
        setattr(layer, _HELD, held)

    def _check_scale_bias(self, layer: torch.nn.Module, values: torch.Tensor,
                          scale: torch.Tensor, bias: torch.Tensor) -> None:
        expected = 8.0 * scale * values.to(_F32).sum(dim=-1)
        bound = 8.0 * scale.abs() * values.to(_F32).abs().sum(dim=-1)
        bad = (bias.to(_F32) - expected).abs() > _BIAS_RTOL * bound + 1e-6
        if not bool(bad.any()):
            return
        row = int(bad.nonzero()[0, 0])
        sizes = layer.ascend_partition_sizes
        shard_index, channel = 0, row
        while channel >= sizes[shard_index]:
            channel -= sizes[shard_index]
            shard_index += 1
        shard = layer.ascend_shards[shard_index] if len(sizes) > 1 else None
        name = self._checkpoint_name("scale_bias", shard)
        raise QuantizationError(
            f"Checkpoint tensor {name} does not fit its weight: output channel {channel} "
            f"(of this rank's shard) holds {float(bias[row]):.6g}, but 8 * weight_scale * "
            f"the sum of that row's int4 weights is {float(expected[row]):.6g}. The NPU's "
            "int8 x int4 kernel adds scale_bias as its correction, so a wrong one gives "
            "wrong outputs.",
            "Re-export the layer with ModelSlim's W4A8_DYNAMIC, which writes scale_bias "
            "from the same int4 weights.",
        )

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        y = self.w4a8.w4a8_matmul(rows, getattr(layer, _HELD), bias)
        return y.reshape(*x.shape[:-1], y.shape[-1])
