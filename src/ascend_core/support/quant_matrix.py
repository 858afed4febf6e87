"""The quantization rows of the support matrix: one verdict per (format, layer kind, device).

A combination with no Supported row is refused before any weight loads, naming the
layer, the scheme and what would serve it; vLLM's own kernel selection (CUDA kernels
for WNA16, FP8 and block FP8) never runs for it.
"""

from __future__ import annotations

from collections.abc import Mapping

from ascend_core.errors import QuantizationError
from ascend_core.quantization.export_layers import LayerKind, QuantFormat, QuantizedLayers
from ascend_core.support.matrix import Refused, Supported, Verdict
from ports.device import DeviceKind

_CPU, _NPU = DeviceKind.CPU, DeviceKind.NPU
_F, _K = QuantFormat, LayerKind
_DEVICE_NAMES = {"cpu": "the host device", "npu": "an Ascend NPU"}

_SERVED_HERE = (
    "re-export with ModelSlim as W8A8, W8A8_DYNAMIC, W8A16 or W4A8_DYNAMIC (linear layers) or "
    "W8A8_DYNAMIC or W4A8_DYNAMIC (MoE experts), or with llm-compressor as int8 W8A8 with "
    "symmetric activations or as "
    "W4A16 (linear layers and MoE experts), which this build serves on both devices; or "
    "serve the unquantized model"
)
_W8A8_LINEAR_HOST = Supported(
    "the plugin's W8A8 linear method: int8 x int8 -> int32 products in torch, static "
    "per-tensor activations, quant_bias and deq_scale"
)
_W8A8_LINEAR_NPU = Supported(
    "npu_quantize then npu_quant_matmul with the deq_scale of npu_trans_quant_param; "
    "proven on the emulated torch_npu, not on hardware"
)
_DYN_LINEAR_HOST = Supported(
    "the plugin's W8A8_DYNAMIC linear method: per-token int8 activations, exact int32 "
    "products in torch, per-channel weight_scale"
)
_DYN_LINEAR_NPU = Supported(
    "npu_dynamic_quant then npu_quant_matmul with pertoken_scale; proven on the emulated "
    "torch_npu, not on hardware"
)
_DYN_EXPERTS_HOST = Supported(
    "the plugin's W8A8_DYNAMIC MoE method: each row quantized per token before each grouped "
    "matmul, exact int32 products"
)
_DYN_EXPERTS_NPU = Supported(
    "npu_dynamic_quant then npu_grouped_matmul with scale and per_token_scale; proven on the "
    "emulated torch_npu, not on hardware"
)
_CT_INT8_HOST = Supported(
    "vLLM's compressed-tensors config with the plugin's int8 ScaledMM kernel (exact int32 "
    "products in torch)"
)
_CT_INT8_NPU = Supported(
    "vLLM's compressed-tensors config with the plugin's int8 ScaledMM kernel on "
    "npu_dynamic_quant/npu_quantize and npu_quant_matmul; proven on the emulated torch_npu, "
    "not on hardware"
)
_CT_W4A16_HOST = Supported(
    "vLLM's compressed-tensors config with the plugin's W4A16 kernel (AscendW4A16LinearKernel): "
    "the int4 weights unpacked once at load and dequantized exactly, (q - zero) * scale per "
    "group, to the params dtype; float matmul"
)
_CT_W4A16_NPU = Supported(
    "vLLM's compressed-tensors config with the plugin's W4A16 kernel: weights repacked by "
    "npu_convert_weight_to_int4pack, npu_weight_quant_batchmatmul with per-group "
    "antiquant_scale (and antiquant_offset = -zero for asymmetric layers; group sizes a "
    "multiple of 32 below the layer's input size, as the op takes); proven on the emulated "
    "torch_npu, not on hardware"
)
_CT_W4A16_EXPERTS_HOST = Supported(
    "the plugin's W4A16 MoE method (AscendW4A16MoeMethod, in place of vLLM's WNA16 MoE "
    "method, patch ct-wna16-moe-int4): each expert's int4 weights unpacked once at load and "
    "dequantized exactly, (q - zero) * scale per group or output channel, to the params "
    "dtype; then the float MoE layer (routing, experts and combine on the device's MoeOps)"
)
_CT_W4A16_EXPERTS_NPU = Supported(
    "the plugin's W4A16 MoE method on the NPU: each expert repacked by "
    "npu_convert_weight_to_int4pack, then npu_grouped_matmul in its antiquant mode "
    "(antiquant_scale per group or channel, antiquant_offset = -zero for asymmetric "
    "experts) around npu_swiglu, as vllm-ascend serves W4A16 experts; bfloat16/float16 "
    "models, no expert parallelism; proven on the emulated torch_npu, not on hardware"
)
_W8A16_LINEAR_HOST = Supported(
    "the plugin's W8A16 linear method: int8 weights dequantized per output channel "
    "((weight - weight_offset) * weight_scale) in float32, float activations"
)
_W8A16_LINEAR_NPU = Supported(
    "npu_weight_quant_batchmatmul with per-channel antiquant_scale and the negated "
    "weight_offset; proven on the emulated torch_npu, not on hardware"
)
_NO_W8A16_EXPERTS = Refused(
    "W8A16 MoE experts have no grouped method (vllm-ascend serves ModelSlim W8A16 for "
    "linear layers only)",
    "re-export with ModelSlim keeping the experts W8A8_DYNAMIC (the linear layers may stay "
    "W8A16); or serve the unquantized model",
)
_W4A8_EXPERTS_HOST = Supported(
    "the plugin's W4A8_DYNAMIC MoE method: int4 weights unpacked once at load (scale_bias "
    "checked against them), each row quantized per token, exact int8 x int4 -> int32 products"
)
_W4A8_EXPERTS_NPU = Supported(
    "npu_convert_weight_to_int4pack at load, then npu_dynamic_quant and npu_grouped_matmul "
    "with int4 weights, int64 scale, the scale_bias as bias and per_token_scale; proven on "
    "the emulated torch_npu, not on hardware"
)
_W4A8_LINEAR_HOST = Supported(
    "the plugin's W4A8_DYNAMIC linear method (per-channel, ModelSlim version 1.0.0): int4 "
    "weights unpacked once at load (scale_bias checked against them), activations quantized "
    "per token, exact int8 x int4 -> int32 products"
)
_W4A8_LINEAR_NPU = Supported(
    "npu_convert_weight_to_int4pack at load, then npu_dynamic_quant and npu_grouped_matmul "
    "with the layer as one group (A8W4: int64 scale, the scale_bias as bias, "
    "per_token_scale), as vllm-ascend runs its per-channel W4A8 shared experts; proven on "
    "the emulated torch_npu, not on hardware"
)
_PER_CHANNEL_W4A8 = (
    "re-export with ModelSlim's per-channel W4A8_DYNAMIC (group_size 0, served for linear "
    "layers and MoE experts) or as W8A8_DYNAMIC"
)
_NO_W4A8_PER_GROUP_LINEAR = Refused(
    "per-group W4A8_DYNAMIC linear layers have no method in this build: vllm-ascend serves "
    "them weight-only (npu_weight_quant_batchmatmul with the int4 weight and "
    "weight_scale * weight_scale_second per group, activations not quantized), a linear "
    "method it marks deprecated",
    _PER_CHANNEL_W4A8,
)
_NO_W4A8_PER_GROUP_EXPERTS = Refused(
    "per-group W4A8_DYNAMIC MoE experts are not served, and vllm-ascend no longer serves "
    "them either (its W4A8_DYNAMIC MoE method refuses group_size > 0: per-channel only)",
    _PER_CHANNEL_W4A8,
)
_NO_STATIC_EXPERTS = Refused(
    "MoE experts in static W8A8 have no grouped method in this build (the experts' "
    "activations are quantized per token)",
    "re-export with ModelSlim keeping the experts W8A8_DYNAMIC (the linear layers may stay "
    "W8A8); or serve the unquantized model",
)
_NO_QUANT_EMBEDDING = Refused(
    "embeddings and the LM head are served in float only",
    "re-export with ModelSlim keeping embed_tokens and lm_head FLOAT",
)
_NO_MODELSLIM_UNKNOWN = Refused(
    "ModelSlim schemes served here are W8A8, W8A8_DYNAMIC, W8A16, W4A8_DYNAMIC "
    "(per-channel) and FLOAT",
    _SERVED_HERE,
)
_NO_CT_ASYM = Refused(
    "the int8 kernel serves symmetric weights and activations only (no zero points)",
    "re-quantize with llm-compressor using symmetric int8 W8A8 (e.g. its W8A8 preset); "
    "or " + _SERVED_HERE,
)
_NO_CT_EXPERTS = Refused(
    "compressed-tensors MoE experts would run vLLM's fused-MoE kernels, written in Triton "
    "and CUDA, which neither the host nor an NPU runs here",
    "re-export with ModelSlim as W8A8_DYNAMIC (served for MoE experts), or keep the experts "
    "unquantized (llm-compressor's ignore list, e.g. \"re:.*mlp.experts.*\")",
)
_NO_WNA16 = Refused(
    "weight-only layers other than plain 4-bit pack-quantized W4A16 (other bit widths, "
    "activation-ordered groups with g_idx) would pick one of vLLM's CUDA kernels (Marlin, "
    "Machete, ...), and this build has no host or Ascend kernel for them",
    "re-quantize with llm-compressor's W4A16 or W4A16_ASYM preset (int4, group-wise, "
    "actorder static or none), served on both devices; or " + _SERVED_HERE,
)
_FP8_HOST = Supported(
    "the plugin's fp8 kernel (AscendFp8DequantLinearKernel, in vLLM's fp8 and block-fp8 "
    "kernel tables): float8_e4m3fn weights dequantized once at load, float(w) * scale per "
    "output channel or per [n, k] block, to the params dtype; float activations and matmul"
)
_FP8_NPU = Supported(
    "Atlas A2/A3 have no fp8 matmul: the weights are dequantized at load to the model dtype "
    "(as vllm-ascend does for block fp8 there) and served by a float matmul; A5 takes the "
    "same path in this build; the torch code is the host's (run on the emulated NPU too)"
)
_NO_FP8 = Refused(
    "fp8 checkpoints are served with a scale per output channel (FP8_DYNAMIC) or per block "
    "(FP8_BLOCK, weight_block_size) and dynamic activations; per-tensor weight scales and "
    "static activation scales are refused, as vllm-ascend refuses them",
    "re-quantize with llm-compressor's FP8_DYNAMIC or FP8_BLOCK preset, or serve the "
    "original bf16 checkpoint",
)
_FP8_EXPERTS_HOST = Supported(
    "the plugin's fp8 MoE method (AscendFp8DequantMoeMethod, in place of vLLM's fp8 MoE "
    "methods, patches ct-fp8-moe-dequant and fp8-moe-dequant): each expert's float8_e4m3fn "
    "weights dequantized once at load, per output channel or per [n, k] block (the fp8 "
    "method's weight_scale_inv), to the params dtype; then the "
    "float MoE layer (routing, experts and combine on the device's MoeOps)"
)
_FP8_EXPERTS_NPU = Supported(
    "Atlas A2/A3 have no fp8 matmul: each expert's weights are dequantized at load to the "
    "model dtype, as the dense fp8 layers are, and served by the float MoE path "
    "(npu_grouped_matmul); on the emulated NPU (bf16, graphs) the host's ids"
)
_NO_CT_OTHER = Refused(
    "the compressed-tensors schemes served here are int8 W8A8 with symmetric per-token or "
    "per-tensor activations and per-channel or per-tensor weights",
    _SERVED_HERE,
)

_BOTH = (_CPU, _NPU)
QUANT_MATRIX: Mapping[tuple[QuantFormat, LayerKind, DeviceKind], Verdict] = {
    (_F.MODELSLIM_W8A8, _K.LINEAR, _CPU): _W8A8_LINEAR_HOST,
    (_F.MODELSLIM_W8A8, _K.LINEAR, _NPU): _W8A8_LINEAR_NPU,
    **{(_F.MODELSLIM_W8A8, _K.EXPERTS, d): _NO_STATIC_EXPERTS for d in _BOTH},
    (_F.MODELSLIM_W8A8_DYNAMIC, _K.LINEAR, _CPU): _DYN_LINEAR_HOST,
    (_F.MODELSLIM_W8A8_DYNAMIC, _K.LINEAR, _NPU): _DYN_LINEAR_NPU,
    (_F.MODELSLIM_W8A8_DYNAMIC, _K.EXPERTS, _CPU): _DYN_EXPERTS_HOST,
    (_F.MODELSLIM_W8A8_DYNAMIC, _K.EXPERTS, _NPU): _DYN_EXPERTS_NPU,
    (_F.MODELSLIM_W8A16, _K.LINEAR, _CPU): _W8A16_LINEAR_HOST,
    (_F.MODELSLIM_W8A16, _K.LINEAR, _NPU): _W8A16_LINEAR_NPU,
    **{(_F.MODELSLIM_W8A16, _K.EXPERTS, d): _NO_W8A16_EXPERTS for d in _BOTH},
    (_F.MODELSLIM_W4A8_DYNAMIC, _K.LINEAR, _CPU): _W4A8_LINEAR_HOST,
    (_F.MODELSLIM_W4A8_DYNAMIC, _K.LINEAR, _NPU): _W4A8_LINEAR_NPU,
    **{(_F.MODELSLIM_W4A8_PER_GROUP, _K.LINEAR, d): _NO_W4A8_PER_GROUP_LINEAR for d in _BOTH},
    **{(_F.MODELSLIM_W4A8_PER_GROUP, _K.EXPERTS, d): _NO_W4A8_PER_GROUP_EXPERTS
       for d in _BOTH},
    (_F.MODELSLIM_W4A8_DYNAMIC, _K.EXPERTS, _CPU): _W4A8_EXPERTS_HOST,
    (_F.MODELSLIM_W4A8_DYNAMIC, _K.EXPERTS, _NPU): _W4A8_EXPERTS_NPU,
    **{(_F.MODELSLIM_UNKNOWN, k, d): _NO_MODELSLIM_UNKNOWN for k in (_K.LINEAR, _K.EXPERTS)
       for d in _BOTH},
    (_F.CT_INT8_W8A8, _K.LINEAR, _CPU): _CT_INT8_HOST,
    (_F.CT_INT8_W8A8, _K.LINEAR, _NPU): _CT_INT8_NPU,
    **{(_F.CT_INT8_W8A8, _K.EXPERTS, d): _NO_CT_EXPERTS for d in _BOTH},
    **{(_F.CT_INT8_ASYMMETRIC, k, d): _NO_CT_ASYM for k in (_K.LINEAR, _K.EXPERTS)
       for d in _BOTH},
    (_F.CT_W4A16, _K.LINEAR, _CPU): _CT_W4A16_HOST,
    (_F.CT_W4A16, _K.LINEAR, _NPU): _CT_W4A16_NPU,
    (_F.CT_W4A16, _K.EXPERTS, _CPU): _CT_W4A16_EXPERTS_HOST,
    (_F.CT_W4A16, _K.EXPERTS, _NPU): _CT_W4A16_EXPERTS_NPU,
    **{(_F.CT_WNA16, k, d): _NO_WNA16 for k in (_K.LINEAR, _K.EXPERTS) for d in _BOTH},
    **{(f, _K.LINEAR, _CPU): _FP8_HOST for f in (_F.CT_FP8_CHANNEL, _F.CT_FP8_BLOCK,
                                                   _F.FP8_BLOCK)},
    **{(f, _K.LINEAR, _NPU): _FP8_NPU for f in (_F.CT_FP8_CHANNEL, _F.CT_FP8_BLOCK,
                                                  _F.FP8_BLOCK)},
    **{(f, _K.EXPERTS, _CPU): _FP8_EXPERTS_HOST for f in (_F.CT_FP8_CHANNEL, _F.CT_FP8_BLOCK,
                                                            _F.FP8_BLOCK)},
    **{(f, _K.EXPERTS, _NPU): _FP8_EXPERTS_NPU for f in (_F.CT_FP8_CHANNEL, _F.CT_FP8_BLOCK,
                                                           _F.FP8_BLOCK)},
    **{(f, k, d): _NO_FP8 for f in (_F.CT_FP8, _F.FP8_CHANNEL)
       for k in (_K.LINEAR, _K.EXPERTS) for d in _BOTH},
    **{(_F.CT_OTHER, k, d): _NO_CT_OTHER for k in (_K.LINEAR, _K.EXPERTS) for d in _BOTH},
    **{(f, _K.EMBEDDING, d): _NO_QUANT_EMBEDDING for f in QuantFormat for d in _BOTH},
}


def quant_verdict(fmt: QuantFormat, kind: LayerKind, device: DeviceKind) -> Verdict:
    """The table's verdict; a combination with no row is refused (nothing was built)."""
    return QUANT_MATRIX.get(
        (fmt, kind, device),
        Refused(f"{fmt.value} {kind.value} have no verdict for the {device.value} device",
                _SERVED_HERE),
    )


def device_name(device: DeviceKind) -> str:
    """The device as a refusal names it: "the host device", "an Ascend NPU"."""
    return _DEVICE_NAMES.get(device.value, device.value)


def quant_refusals(
    layers: tuple[QuantizedLayers, ...], device: DeviceKind
) -> tuple[QuantizationError, ...]:
    """One error per (format, kind) the device does not serve, naming its first layer."""
    where = device_name(device)
    out = []
    for group in layers:
        v = quant_verdict(group.format, group.kind, device)
        if not isinstance(v, Refused):
            continue
        more = f" (and {group.count - 1} more)" if group.count > 1 else ""
        out.append(
            QuantizationError(
                f"Layer {group.first}{more}: {group.says}, {group.format.value}, which "
                f"this build of the Ascend plugin does not serve for {group.kind.value} on "
                f"{where}: {v.reason}.",
                f"{v.instead}.",
            )
        )
    return tuple(out)
