"""vLLM's fp8 ScaledMM kernel interface, served by dequantizing the weights at load.

Ascend A2/A3 have no fp8 matmul (ascend_core.quantization.fp8 says which path each chip
takes, and why). vLLM's compressed-tensors FP8 scheme and its `fp8` method (the HF format
of DeepSeek-V3's and Qwen3's releases: weight_scale_inv per weight_block_size block)
create the float8_e4m3fn weight and its scales and pick a kernel from the per-platform
tables (`oot-fp8-scaled-mm-kernel`, `oot-fp8-block-scaled-mm-kernel` put this one under
PlatformEnum.OOT). At load it turns them into one weight in the params dtype:

    per channel: w[o, i] = float32(q[o, i]) * scale[o]
    per block:   w[o, i] = float32(q[o, i]) * scale[o // block_n, i // block_k]

computed in float32 and cast once; the layer then runs a float matmul, activations in the
model dtype (the checkpoint's fp8 activation quantization is not applied: weight-only,
as on the reference's A2/A3 path). What it cannot serve raises the plugin's error while
the model is built, before any weight loads (the plan refuses the same exports first).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import (
    FP8ScaledMMLinearKernel,
    FP8ScaledMMLinearLayerConfig,
    ScaledMMLinearKernel,
)
from vllm.model_executor.utils import replace_parameter

from ascend_core.errors import QuantizationError

_F32 = torch.float32
_SCALE_NAMES = ("weight_scale_inv", "weight_scale")  # HF fp8 block, compressed-tensors


def dequantize_fp8(weight: torch.Tensor, scale: torch.Tensor,
                   block: Sequence[int] | None, dtype: torch.dtype) -> torch.Tensor:
    """The [n, k] weight in `dtype` that an fp8 weight [n, k] and its scales stand for:
    scale [n] or [n, 1] per output channel, [ceil(n / bn), ceil(k / bk)] per block."""
    n, k = weight.shape
    s = scale.to(_F32)
    if block is None:
        full = s.reshape(n, 1)
    else:
        bn, bk = int(block[0]), int(block[1])
        full = s.repeat_interleave(bn, dim=0)[:n].repeat_interleave(bk, dim=1)[:, :k]
    return (weight.to(_F32) * full).to(dtype)


class AscendFp8DequantLinearKernel(FP8ScaledMMLinearKernel):
    """Registered under PlatformEnum.OOT for vLLM's fp8 and block-fp8 linear layers; one
    per layer, built in create_weights."""

    def __init__(self, c: FP8ScaledMMLinearLayerConfig,
                 layer_param_names: Sequence[str] = ("weight", "weight_scale", "input_scale",
                                                     "input_scale_ub")) -> None:
        weights, acts = c.weight_quant_key.scale, c.activation_quant_key.scale
        n, k = c.weight_shape
        if weights.group_shape.is_per_tensor() or acts.static:
            what = ("per-tensor weight scales" if weights.group_shape.is_per_tensor()
                    else "static activation scales (input_scale)")
            raise QuantizationError(
                f"An fp8 linear layer with a [{n}, {k}] weight has {what}, which the Ascend "
                "plugin does not serve: it dequantizes fp8 weights at load and serves a "
                "scale per output channel or per block, with dynamic activations.",
                "Re-quantize with llm-compressor's FP8_DYNAMIC or FP8_BLOCK preset, or "
                "serve the original bf16 checkpoint.",
            )
        # Not FP8ScaledMMLinearKernel.__init__: no fp8 activation quantizer is built.
        ScaledMMLinearKernel.__init__(self, c, layer_param_names)

    @classmethod
    def is_supported(cls, compute_capability: int | None = None) -> tuple[bool, str | None]:
        return True, None

    @classmethod
    def can_implement(cls, c: FP8ScaledMMLinearLayerConfig) -> tuple[bool, str | None]:
        return True, None  # what it refuses, __init__ refuses in the plugin's words

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        block = getattr(layer, "weight_block_size", None)
        weight = layer.weight.data
        if block is None:
            weight = weight.t()  # vLLM's channel processing left it [k, n]
        name = next(s for s in _SCALE_NAMES if getattr(layer, s, None) is not None)
        scale = getattr(layer, name).data
        dtype = getattr(layer, "orig_dtype", self.config.out_dtype)
        dense = dequantize_fp8(weight, scale, block, dtype).contiguous()
        replace_parameter(layer, "weight", dense)
        if hasattr(layer, "processed_weight_dims"):
            del layer.processed_weight_dims  # [n, k] again: the checkpoint's dims
        for gone in (*_SCALE_NAMES, "input_scale", "input_scale_ub"):
            if isinstance(getattr(layer, gone, None), torch.nn.Parameter):
                delattr(layer, gone)
            setattr(layer, gone, None)

    def apply_weights(self, layer: torch.nn.Module, x: torch.Tensor,  # type: ignore[override]
                      bias: torch.Tensor | None = None) -> torch.Tensor:
        return torch.nn.functional.linear(x, layer.weight, bias)

    def apply_scaled_mm(self, *, A: torch.Tensor, B: torch.Tensor, out_dtype: torch.dtype,
                        As: torch.Tensor, Bs: torch.Tensor, bias: torch.Tensor | None,
                        output_shape: list[int]) -> torch.Tensor:
        raise NotImplementedError("apply_weights runs the float matmul itself")
