"""vLLM's mixed-precision (WNA16) kernel interface for compressed-tensors W4A16, on the
Int4WeightOps port of the serving device.

vLLM's CompressedTensorsWNA16 scheme creates the checkpoint's parameters (weight_packed
int32 [n, k / 8], weight_scale [n, k / G], weight_zero_point int32 [n / 8, k / G] for
asymmetric layers) and picks a kernel from its per-platform table, where the
`oot-wna16-mp-kernel` patch puts this one for PlatformEnum.OOT. At load the int4 values
and zero points are unpacked from compressed-tensors' pack-quantized layout (eight
fields per int32, low bits first, each stored + 8) and handed to the port, which keeps
them in its device's own layout.
"""

from __future__ import annotations

import torch
from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
from vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel import (
    MPLinearKernel,
    MPLinearLayerConfig,
)
from vllm.model_executor.utils import replace_parameter
from vllm.scalar_type import scalar_types

from adapters.container import container
from ascend_core.errors import QuantizationError

_BITS = 4
_TYPES = (scalar_types.uint4b8, scalar_types.uint4)  # symmetric, with zero points
_HELD = "ascend_int4"  # layer attribute: the port's Int4Weight


class AscendW4A16LinearKernel(MPLinearKernel):
    """Registered under PlatformEnum.OOT by the `oot-wna16-mp-kernel` patch; vLLM builds
    one per layer in create_weights, before any weight loads, so a shape or group size the
    serving device cannot take stops startup there."""

    @classmethod
    def get_min_capability(cls) -> int:
        return 0  # no CUDA capability involved

    @classmethod
    def can_implement(cls, c: MPLinearLayerConfig) -> tuple[bool, str | None]:
        if c.weight_type not in _TYPES:
            return False, f"serves 4-bit weights (uint4b8, uint4) only, not {c.weight_type}"
        return True, None

    def __init__(self, c: MPLinearLayerConfig, w_q_param_name: str, w_s_param_name: str,
                 w_zp_param_name: str | None = None) -> None:
        super().__init__(c, w_q_param_name, w_s_param_name, w_zp_param_name)
        self.ops = container().int4_weight_ops()
        k, n = c.partition_weight_shape
        self.group_size = k if c.group_size == -1 else c.group_size
        reason = self.ops.int4_refusal(n, k, self.group_size)
        if reason is not None:
            raise QuantizationError(
                f"A compressed-tensors W4A16 layer with a [{n}, {k}] weight (output x input "
                f"features on this rank) and groups of {self.group_size} cannot be served "
                f"on this device: {reason}.",
                "Re-quantize with llm-compressor using a group size the device takes (a "
                "multiple of 32 smaller than every layer's input size, e.g. 128 for most "
                "models, or per-channel), or keep that layer unquantized (its ignore list).",
            )

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        k, n = self.config.partition_weight_shape
        packed, scale, zero_packed = self._get_weight_params(layer)
        values = unpack_from_int32(packed.data, _BITS, torch.Size([n, k]), packed_dim=1)
        zero = None
        if self.config.zero_points and zero_packed is not None:
            zero = unpack_from_int32(zero_packed.data, _BITS, scale.shape, packed_dim=0)
        held = self.ops.prepare_int4(values, scale.data, zero, self.group_size,
                                     layer.params_dtype)
        # The parameters now hold the device's layout (what the model's memory is).
        replace_parameter(layer, self.w_q_name, held.packed)
        replace_parameter(layer, self.w_s_name, held.scale)
        if self.w_zp_name is not None and hasattr(layer, self.w_zp_name):
            delattr(layer, self.w_zp_name)
        if held.offset is not None:
            layer.ascend_int4_offset = held.offset
        setattr(layer, _HELD, held)

    def apply_weights(self, layer: torch.nn.Module, x: torch.Tensor,
                      bias: torch.Tensor | None = None) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        y = self.ops.int4_matmul(rows, getattr(layer, _HELD), bias)
        return y.reshape(*x.shape[:-1], y.shape[-1])
