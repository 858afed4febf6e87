"""vLLM's MoE method for ModelSlim W8A8_DYNAMIC experts: int8 weights, per-token activations.

Routing, permutation and the combine are AscendMoeMethod's (float, on MoeOps); the experts
run through the serving device's QuantMoeOps. The checkpoint holds, per expert e,
`<prefix>.<e>.{gate,up,down}_proj.{weight,weight_scale,weight_offset}` (int8 [out, in],
float [out, 1], zeros [out, 1]); vLLM's expert loader puts them into w13_* (gate then up)
and w2_*. Every tensor is checked against the core's table as it loads, and one that never
loaded stops startup in process_weights_after_loading, named as in the checkpoint.

EPLB (`--enable-eplb`): every per-expert tensor the experts' math reads is one of the
layer's parameters, [experts, ...] and contiguous: the int8 weights (on the NPU the
parameter *is* the transposed [E, in, out] layout the grouped matmul reads), the float32
per-channel scales and offsets. The scales the math reads (`ascend_w13_scale`,
`ascend_w2_scale`) are views of the scale parameters, so vLLM's rearrange, which copies
each parameter's expert rows in place (RoutedExperts.get_expert_weights, int8 as uint8),
moves the whole expert and the views follow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from vllm.model_executor.layers.fused_moe.config import FusedMoEConfig
from vllm.model_executor.layers.fused_moe.routed_experts import FusedMoeWeightScaleSupported
from vllm.model_executor.utils import set_weight_attrs

from adapters.container import container
from adapters.vllm.layers.eplb import eplb_state_of
from adapters.vllm.layers.fused_moe import (
    AscendMoeMethod,
    ExpertExchange,
    expert_exchange_of,
    routed_num_experts,
    routing_of,
)
from ascend_core.errors import QuantizationError
from ascend_core.quantization import LayerScheme, QuantScheme
from ascend_core.quantization.tensors import (
    SchemeTensor,
    check_dtype,
    expert_tensors,
    missing_tensor,
)
from ports.quant_moe import QuantMoeOps

if TYPE_CHECKING:
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

_F32 = torch.float32
_STEMS = {"w13": ("w1", "w3"), "w2": ("w2",)}  # vLLM's parameter stem -> its shard ids
_LOADED = "_ascend_loaded"  # layer attribute: {(parameter, shard id, global expert)}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class AscendW8A8DynamicMoeMethod(AscendMoeMethod):
    """Per token s = max|x| / 127, x_q = round(x / s), before each grouped matmul;
    y = (x_q @ W_e^T) * weight_scale_e * s. Weights stay int8 on the device."""

    scheme = QuantScheme.W8A8_DYNAMIC

    def __init__(self, moe: FusedMoEConfig, layer_scheme: LayerScheme) -> None:
        super().__init__(moe)
        self.layer_scheme = layer_scheme
        self.quant_moe: QuantMoeOps = container().quant_moe_ops()

    @property
    def supports_eplb(self) -> bool:
        return True  # every expert tensor a parameter (module docstring); ids mapped in apply

    def create_weights(
        self,
        layer: RoutedExperts,
        num_experts: int,
        hidden_size: int,
        intermediate_size_per_partition: int,
        params_dtype: torch.dtype,
        **extra_weight_attrs: Any,
    ) -> None:
        inter = intermediate_size_per_partition
        shapes = {"w13": (2 * inter, hidden_size), "w2": (hidden_size, inter)}
        loader = extra_weight_attrs.pop("weight_loader")
        object.__setattr__(layer, _LOADED, set())
        for stem, (out, inp) in shapes.items():
            for tensor in expert_tensors(self.scheme):
                shape = self._param_shape(stem, tensor.suffix, num_experts, out, inp)
                if tensor.suffix == "weight":
                    data = torch.empty(shape, dtype=torch.int8)
                    attrs: dict[str, Any] = {}
                else:  # per-channel scale / offset, held in float32 (what the math reads)
                    data = torch.empty(shape, dtype=_F32)
                    attrs = {"quant_method": FusedMoeWeightScaleSupported.CHANNEL.value}
                param = torch.nn.Parameter(data, requires_grad=False)
                attrs.update(extra_weight_attrs)
                attrs["weight_loader"] = self._checked(layer, stem, tensor, loader)
                set_weight_attrs(param, attrs)
                layer.register_parameter(f"{stem}_{tensor.suffix}", param)

    def _param_shape(self, stem: str, suffix: str, num_experts: int, out: int, inp: int
                     ) -> tuple[int, ...]:
        """The parameter vLLM's loader fills from a [out, in] projection's `suffix` tensor."""
        return (num_experts, out, inp) if suffix == "weight" else (num_experts, out, 1)

    def _checkpoint_name(self, layer: RoutedExperts, suffix: str, shard: str, expert: int
                         ) -> str:
        projection = {
            "w1": getattr(layer, "ckpt_gate_proj_name", "gate_proj"),
            "w3": getattr(layer, "ckpt_up_proj_name", "up_proj"),
            "w2": getattr(layer, "ckpt_down_proj_name", "down_proj"),
        }[shard]
        # `expert` is physical; with EPLB's redundant experts, vLLM loads physical p from
        # logical p mod the routed experts (its initial placement), the checkpoint's name.
        logical = expert % routed_num_experts(layer)
        return f"{self.layer_scheme.prefix}.{logical}.{projection}.{suffix}"

    def _checked(self, layer: RoutedExperts, stem: str, tensor: SchemeTensor,
                 loader: Callable[..., Any]) -> Callable[..., Any]:
        def load(param: torch.nn.Parameter, loaded_weight: torch.Tensor, weight_name: str,
                 shard_id: str, expert_id: int, return_success: bool = False) -> Any:
            name = self._checkpoint_name(layer, tensor.suffix, shard_id, expert_id)
            check_dtype(tensor, name, _dtype_name(loaded_weight.dtype), self.scheme)
            self._check_shape(layer, tensor, name, shard_id, tuple(loaded_weight.shape))
            done = loader(param, loaded_weight, weight_name, shard_id, expert_id,
                          return_success=True)
            if done:
                getattr(layer, _LOADED).add((f"{stem}_{tensor.suffix}", shard_id, expert_id))
            return done if return_success else None

        return load

    def _check_shape(self, layer: RoutedExperts, tensor: SchemeTensor, name: str, shard: str,
                     shape: tuple[int, ...]) -> None:
        """Refuse a checkpoint tensor of the wrong shape, named (vLLM's loader would fail on
        it in its own words); int8 experts leave it to the loader."""

    def process_weights_after_loading(self, layer: RoutedExperts) -> None:
        self._check_loaded(layer)
        w13, w2 = self.quant_moe.prepare_weights(layer.w13_weight.data, layer.w2_weight.data)
        layer.w13_weight.data, layer.w2_weight.data = w13, w2
        experts = layer.w13_weight_scale.shape[0]
        # Views, not copies: EPLB's rearrange moves the parameters in place under them.
        layer.ascend_w13_scale = layer.w13_weight_scale.data.view(experts, -1)
        layer.ascend_w2_scale = layer.w2_weight_scale.data.view(experts, -1)
        # Expert parallel on a device with an exchange (the NPU): tokens travel as int8
        # with their per-token scales (MC2's quant mode, all-to-all), after loading's checks.
        self.exchange = expert_exchange_of(layer)
        self.eplb = eplb_state_of(layer)

    def _check_loaded(self, layer: RoutedExperts) -> None:
        """Routing the device serves, every tensor loaded, symmetric weights."""
        self.routing_rule = routing_of(layer)
        dtype = str(layer.moe_config.in_dtype).removeprefix("torch.")
        self.moe_ops.check(self.routing_rule, routed_num_experts(layer), dtype)
        self._require_loaded(layer)
        for stem in _STEMS:
            if torch.any(getattr(layer, f"{stem}_weight_offset").data != 0):
                raise QuantizationError(
                    f"MoE layer {self.layer_scheme.prefix}: a weight_offset of its experts is "
                    f"not all zeros; {self.scheme.value} experts are served symmetric only.",
                    f"Re-export the model with ModelSlim's symmetric {self.scheme.value} weights.",
                )

    @staticmethod
    def held_experts(layer: RoutedExperts) -> list[int]:
        """Global ids of this rank's experts, in local order."""
        expert_map = layer.expert_map
        if expert_map is None:
            return list(range(layer.local_num_experts))
        local = expert_map.tolist()
        return sorted((g for g, slot in enumerate(local) if slot >= 0), key=local.__getitem__)

    def _require_loaded(self, layer: RoutedExperts) -> None:
        loaded: set[tuple[str, str, int]] = getattr(layer, _LOADED)
        held = self.held_experts(layer)
        for stem, shards in _STEMS.items():
            for tensor in expert_tensors(self.scheme):
                for expert in held:
                    for shard in shards:
                        if (f"{stem}_{tensor.suffix}", shard, expert) not in loaded:
                            name = self._checkpoint_name(layer, tensor.suffix, shard, expert)
                            raise missing_tensor(name, tensor, self.scheme)

    def exchanged(
        self, layer: RoutedExperts, exchange: ExpertExchange, x: torch.Tensor,
        ids: torch.Tensor, weights: torch.Tensor,
    ) -> torch.Tensor:
        w13, w13_scale = layer.w13_weight, layer.ascend_w13_scale
        w2, w2_scale = layer.w2_weight, layer.ascend_w2_scale
        return exchange.exchange(
            x, ids, weights,
            lambda method, xs, i, w, ep: exchange.comm.ep_experts_w8a8_dynamic(
                method, xs, i, w, w13, w13_scale, w2, w2_scale, ep
            ),
        )

    def run_experts(
        self, layer: RoutedExperts, rows: torch.Tensor, group_sizes: torch.Tensor
    ) -> torch.Tensor:
        return self.quant_moe.grouped_mlp_w8a8_dynamic(
            rows, group_sizes, layer.w13_weight, layer.ascend_w13_scale,
            layer.w2_weight, layer.ascend_w2_scale,
        )
