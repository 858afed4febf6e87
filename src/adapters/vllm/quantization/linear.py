"""vLLM linear methods for ModelSlim W8A8 (static), W8A8_DYNAMIC and W8A16 layers.

Weights stay int8; the math goes through the serving device's QuantOps port. Every
checkpoint tensor is checked against the core's table of what the layer's scheme
stores (ascend_core.quantization.tensors) as it loads, and a required tensor that
never loaded stops startup in process_weights_after_loading, before serving.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from vllm.model_executor.layers.linear import (
    LinearMethodBase,
    QKVParallelLinear,
    RowParallelLinear,
)
from vllm.model_executor.utils import set_weight_attrs

from adapters.container import container
from adapters.torch.static_quant import static_activation_params
from ascend_core.errors import QuantizationError
from ascend_core.quantization import LayerScheme, QuantScheme
from ascend_core.quantization.tensors import (
    SchemeTensor,
    check_dtype,
    missing_tensor,
    scheme_tensors,
)
from ports.quant import QuantOps
from ports.weight_quant import WeightQuantOps

_F32 = torch.float32
_QKV_IDS = ("q", "k", "v")
_LOADED = "_ascend_loaded"  # layer attribute: suffix -> shard ids loaded


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def float_bits(values: torch.Tensor) -> torch.Tensor:
    """int64 tensors holding float32 bit patterns (ModelSlim's float16 deq_scale) as float32."""
    return values.to(torch.int32).view(_F32)


def _shard_ids(layer: torch.nn.Module, shards: int) -> tuple[Any, ...]:
    if shards == 1:
        return (None,)
    if isinstance(layer, QKVParallelLinear):
        return _QKV_IDS
    return tuple(range(shards))  # MergedColumnParallelLinear numbers its shards


class Int8LinearMethod(LinearMethodBase):
    """What both schemes share: parameters, checked loading, the int8 weight layout."""

    scheme: QuantScheme

    def __init__(self, layer_scheme: LayerScheme) -> None:
        self.layer_scheme = layer_scheme
        self.quant: QuantOps = container().quant_ops()

    # -- weights ---------------------------------------------------------------------

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
        n, k, shards = sum(output_partition_sizes), input_size_per_partition, len(
            output_partition_sizes
        )
        loader = extra_weight_attrs["weight_loader"]
        object.__setattr__(layer, _LOADED, {})
        layer.ascend_shards = _shard_ids(layer, shards)
        for tensor in scheme_tensors(self.scheme):
            data, attrs = _parameter(tensor.suffix, n, k, shards)
            param = torch.nn.Parameter(data, requires_grad=False)
            attrs["weight_loader"] = self._checked(layer, tensor, loader)
            set_weight_attrs(param, attrs)
            layer.register_parameter(tensor.suffix, param)

    def _checkpoint_name(self, suffix: str, shard: Any) -> str:
        weights = self.layer_scheme.weights
        if shard is None or len(weights) == 1:
            key = weights[0] if len(weights) == 1 else f"{self.layer_scheme.prefix}.weight"
        else:
            key = weights[_QKV_IDS.index(shard) if isinstance(shard, str) else int(shard)]
        return f"{key.removesuffix('.weight')}.{suffix}"

    def _checked(self, layer: torch.nn.Module, tensor: SchemeTensor, loader: Callable[..., Any]
                 ) -> Callable[..., Any]:
        def load(param: torch.nn.Parameter, loaded: torch.Tensor, *args: Any) -> Any:
            shard = args[0] if args else None
            name = self._checkpoint_name(tensor.suffix, shard)
            check_dtype(tensor, name, _dtype_name(loaded.dtype), self.scheme)
            if loaded.dtype == torch.int64:
                loaded = float_bits(loaded)
            loaded = self.reshape_loaded(tensor, name, loaded, param)
            getattr(layer, _LOADED).setdefault(tensor.suffix, set()).add(shard)
            return loader(param, loaded, *args)

        return load

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        loaded: dict[str, set[Any]] = getattr(layer, _LOADED)
        for tensor in scheme_tensors(self.scheme):
            got = loaded.get(tensor.suffix, set())
            if None in got:
                continue
            absent = [s for s in layer.ascend_shards if s not in got]
            if absent and tensor.required:
                name = self._checkpoint_name(tensor.suffix, absent[0])
                raise missing_tensor(name, tensor, self.scheme)
            if absent:  # optional (older exports' weight_scale/offset): not held
                delattr(layer, tensor.suffix)
        self.finish(layer)
        self.prepare(layer)

    def reshape_loaded(self, tensor: SchemeTensor, name: str, loaded: torch.Tensor,
                       param: torch.Tensor) -> torch.Tensor:
        """The checkpoint tensor in the parameter's layout (schemes that accept more)."""
        return loaded

    def finish(self, layer: torch.nn.Module) -> None:
        """Scheme-specific checks and derived scales, once every tensor has loaded."""

    def prepare(self, layer: torch.nn.Module) -> None:
        """The int8 weight in the layout the device's quant_matmul reads."""
        layer.weight.data = self.quant.prepare_weight(layer.weight.data)


def _parameter(suffix: str, n: int, k: int, shards: int) -> tuple[torch.Tensor, dict[str, Any]]:
    """The empty parameter vLLM's loaders fill, and its loader attributes."""
    if suffix == "weight":
        return torch.empty(n, k, dtype=torch.int8), {"input_dim": 1, "output_dim": 0}
    if suffix in ("input_scale", "input_offset"):
        # One value per shard of a fused layer, placed by vLLM's per-tensor path.
        return torch.empty(shards, dtype=_F32), {"needs_scalar_to_array": True}
    if suffix == "quant_bias":
        return torch.empty(n, dtype=torch.int32), {"output_dim": 0}
    if suffix == "deq_scale":
        return torch.empty(n, dtype=_F32), {"output_dim": 0}
    return torch.empty(n, 1, dtype=_F32), {"output_dim": 0}  # weight_scale / weight_offset


class AscendW8A8LinearMethod(Int8LinearMethod):
    """Static: x_q = saturate(round(x / input_scale + input_offset)) (as x * (1 / scale)),
    y = (x_q @ W^T + quant_bias) * deq_scale. The float bias is folded into quant_bias."""

    scheme = QuantScheme.W8A8

    def finish(self, layer: torch.nn.Module) -> None:
        prefix = self.layer_scheme.prefix
        scales = layer.input_scale.data.to(_F32)
        offsets = layer.input_offset.data.to(_F32)
        if not (torch.all(scales == scales[0]) and torch.all(offsets == offsets[0])):
            raise QuantizationError(
                f"Fused layer {prefix}: its shards have different activation quantization "
                f"(input_scale {scales.tolist()}, input_offset {offsets.tolist()}), but "
                "they share one input.",
                "Re-export with ModelSlim: fused shards are calibrated on the same input.",
            )
        offset = float(offsets[0])
        if offset != round(offset) or not -128 <= offset <= 127 or float(scales[0]) <= 0:
            raise QuantizationError(
                f"Layer {prefix}: input_offset {offset} / input_scale {float(scales[0])} "
                "is not an int8 zero point with a positive scale.",
                "Re-export the model with ModelSlim.",
            )
        # In the params dtype, as npu_quantize takes them (adapters.torch.static_quant).
        layer.ascend_inv_scale, layer.ascend_offset = static_activation_params(
            scales, offsets, layer.params_dtype)
        if not bool(torch.isfinite(layer.ascend_inv_scale).all()):
            raise QuantizationError(
                f"Layer {prefix}: 1 / input_scale ({float(scales[0])}) does not fit "
                f"{layer.params_dtype}, the dtype npu_quantize takes it in.",
                "Serve the model in bfloat16 (--dtype bfloat16), or re-export it with "
                "ModelSlim calibrated on wider activations.",
            )
        layer.deq_scale.data = self.quant.prepare_scale(layer.deq_scale.data, layer.params_dtype)
        # Row-parallel shards sum their partial products: only rank 0 adds the bias.
        layer.ascend_add_bias = not (
            isinstance(layer, RowParallelLinear) and getattr(layer, "tp_rank", 0) > 0
        )

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        x_q = self.quant.quantize_static(rows, layer.ascend_inv_scale, layer.ascend_offset)
        y = self.quant.quant_matmul(
            x_q, layer.weight, layer.deq_scale, x.dtype,
            bias=layer.quant_bias if layer.ascend_add_bias else None,
        )
        return y.reshape(*x.shape[:-1], y.shape[-1])


class AscendW8A8DynamicLinearMethod(Int8LinearMethod):
    """Per token s = max|x| / 127, x_q = round(x / s); y = (x_q @ W^T) * weight_scale * s."""

    scheme = QuantScheme.W8A8_DYNAMIC

    def finish(self, layer: torch.nn.Module) -> None:
        if torch.any(layer.weight_offset.data != 0):
            raise QuantizationError(
                f"Layer {self.layer_scheme.prefix}: weight_offset is not all zeros; "
                "W8A8_DYNAMIC weights are served symmetric only.",
                "Re-export the model with ModelSlim's symmetric W8A8_DYNAMIC weights.",
            )
        layer.ascend_scale = layer.weight_scale.data.reshape(-1)

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        x_q, per_token = self.quant.quantize_per_token(rows)
        y = self.quant.quant_matmul(
            x_q, layer.weight, layer.ascend_scale, x.dtype, pertoken_scale=per_token
        )
        if bias is not None:
            y = y + bias
        return y.reshape(*x.shape[:-1], y.shape[-1])


class AscendW8A16LinearMethod(Int8LinearMethod):
    """Weight only: W = (weight - weight_offset) * weight_scale per output channel,
    y = x @ W^T + bias with x in the model's float dtype (ports/weight_quant.py). The
    port's offset is additive, as npu_weight_quant_batchmatmul takes it, so ModelSlim's
    weight_offset is negated at load."""

    scheme = QuantScheme.W8A16

    def __init__(self, layer_scheme: LayerScheme) -> None:
        super().__init__(layer_scheme)
        self.weight_quant: WeightQuantOps = container().weight_quant_ops()

    def reshape_loaded(self, tensor: SchemeTensor, name: str, loaded: torch.Tensor,
                       param: torch.Tensor) -> torch.Tensor:
        if tensor.suffix not in ("weight_scale", "weight_offset"):
            return loaded
        if loaded.dim() == 1:  # older exports: [n]
            loaded = loaded.unsqueeze(-1)
        if loaded.dim() != 2 or loaded.shape[1] != 1:
            raise QuantizationError(
                f"Checkpoint tensor {name} is {tuple(loaded.shape)}: a per-group W8A16 "
                f"{tensor.suffix} ([n, k / group_size]); this plugin serves W8A16 per "
                "channel only ([n] or [n, 1]).",
                "Re-export the model with ModelSlim's per-channel W8A16 (no group size).",
            )
        return loaded

    def prepare(self, layer: torch.nn.Module) -> None:
        weight, scale, offset = self.weight_quant.prepare_weight_only(
            layer.weight.data, layer.weight_scale.data, -layer.weight_offset.data,
            layer.params_dtype,
        )
        # The port's layout replaces the checkpoint's; weight_offset now holds the
        # additive (negated) offset.
        layer.weight.data, layer.weight_scale.data, layer.weight_offset.data = (
            weight, scale, offset)

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        y = self.weight_quant.weight_quant_matmul(
            rows, layer.weight, layer.weight_scale, layer.weight_offset, bias)
        return y.reshape(*x.shape[:-1], y.shape[-1])


LINEAR_METHODS: dict[QuantScheme, type[Int8LinearMethod]] = {
    QuantScheme.W8A8: AscendW8A8LinearMethod,
    QuantScheme.W8A8_DYNAMIC: AscendW8A8DynamicLinearMethod,
    QuantScheme.W8A16: AscendW8A16LinearMethod,
}
