"""Sizes from model facts: bytes per dtype, the weights, and the KV cache per token."""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from attrs import evolve, frozen

from ascend_core.deployment import ModelFacts, SpeculativeSettings
from ascend_core.errors import ConfigError
from ascend_core.memory_budget.int4_held import Int4Holder, int4_held
from ascend_core.memory_budget.units import GIB
from ascend_core.plan.speculative import draft_layer_facts
from ports.device import ChipFamily
from ports.model_files import TensorHeader

# Memory per device of each chip family when no device is there to ask (the doctor
# on a machine without an NPU). Public product data: Atlas 800I A2 (910B) 64 GB HBM
# per NPU; A3 (910C) 128 GB per package, seen as two 64 GB devices; Atlas 300I Duo
# 96 GB per card of two chips.
NOMINAL_DEVICE_MEMORY: Mapping[ChipFamily, int] = MappingProxyType(
    {
        ChipFamily.A2: 64 * GIB,
        ChipFamily.A3: 64 * GIB,
        ChipFamily.P310: 48 * GIB,
    }
)

# Bits per element of every safetensors dtype.
_SAFETENSORS_BITS: Mapping[str, int] = MappingProxyType(
    {
        "F64": 64, "F32": 32, "F16": 16, "BF16": 16,
        "I64": 64, "I32": 32, "I16": 16, "I8": 8,
        "U64": 64, "U32": 32, "U16": 16, "U8": 8, "BOOL": 8,
        "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
        "F6_E2M3": 6, "F6_E3M2": 6, "F4": 4, "I4": 4, "U4": 4,
    }
)  # fmt: skip
_FLOAT_HEADERS = frozenset({"F64", "F32", "F16", "BF16"})
# Quantization parameters of int8 layers (ModelSlim and compressed-tensors names): held in
# float32 whatever their stored width, because the int8 matmuls of both devices take
# float32 scales (npu_quant_matmul / npu_grouped_matmul with per-token scales, the host's
# int32 -> float32 dequant) and vLLM's compressed-tensors int8 layers create them float32.
# ModelSlim W4A8_DYNAMIC experts' scale_bias (the int4 grouped matmul's correction, float32
# in the file) stays a float32 parameter too (the W4A8_DYNAMIC MoE method keeps it).
QUANT_PARAM_NAMES = frozenset(
    {"weight_scale", "weight_offset", "input_scale", "input_offset", "deq_scale", "scale_bias"}
)
_QUANT_PARAM_BYTES = 4
# fp8 weight matrices and the scales beside them. Where fp8 weights are dequantized at load
# (ascend_core.quantization.fp8: every chip and the host in this build), the layer holds
# the weight in the model dtype and drops its scales.
_FP8_HEADERS = frozenset({"F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ"})
_FP8_SCALE_NAMES = ("weight_scale", "weight_scale_inv")

# Bytes per element of the dtype names vLLM takes for --dtype and --kv-cache-dtype.
_DTYPE_BYTES: Mapping[str, int] = MappingProxyType(
    {
        "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2,
        "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1, "int8": 1,
    }
)  # fmt: skip


def dtype_bytes(name: str, model_dtype: str = "bfloat16") -> int:
    """Bytes per element of a --dtype or --kv-cache-dtype value; "auto" means `model_dtype`."""
    key = name.strip().lower().removeprefix("torch.")
    if key == "auto":
        key = model_dtype.strip().lower().removeprefix("torch.")
    if key not in _DTYPE_BYTES:
        raise ConfigError(
            f"dtype {name!r} has no known element size.",
            "use one of " + ", ".join(sorted(_DTYPE_BYTES)) + " or auto",
        )
    return _DTYPE_BYTES[key]


@frozen
class WeightsSize:
    """The weights of the whole model in device memory, read from safetensors headers."""

    total_bytes: int
    tensors: int
    quantized: bool  # some weight matrices are stored as 8-bit or narrower integers/floats
    detail: str
    # The routed experts' share of total_bytes (`.experts.` tensors; shared experts are not
    # routed): expert parallelism spreads these over the EP group, the rest over TP only.
    routed_expert_bytes: int = 0

    def per_device(self, tp: int, pp: int, ep: int | None = None) -> int:
        """Bytes one device holds: every weight split over tp x pp, the routed experts
        over ep x pp instead where expert parallelism puts them (vLLM's EP group is
        tp x dp with --enable-expert-parallel; None: no EP, the experts split like the
        rest)."""
        experts = self.routed_expert_bytes if ep is not None else 0
        rest = (self.total_bytes - experts) // (tp * pp)
        return rest + (experts // (ep * pp) if ep is not None else 0)


def weights_size(
    headers: Iterable[TensorHeader], model_dtype: str = "bfloat16", fp8_dequantized: bool = False,
    int4_holder: Int4Holder | None = None,
) -> WeightsSize:
    """Sum of every tensor's bytes. Floating tensors count at `model_dtype` (vLLM casts
    them on load), floating quantization parameters (QUANT_PARAM_NAMES) at float32 (held
    so); integer and 8-bit float tensors keep their stored width, except with
    `fp8_dequantized` (the fp8 path dequantizes at load): fp8 weight matrices count at
    `model_dtype` and their scales (weight_scale, weight_scale_inv) not at all. With
    `int4_holder`, the int4 layers' tensors (compressed-tensors W4A16, ModelSlim
    W4A8_DYNAMIC) count as that device holds them after load (ascend_core.memory_budget.
    int4_held); without, at their stored widths."""
    headers = list(headers)
    float_bytes = dtype_bytes(model_dtype)
    int4 = int4_held(headers, int4_holder, float_bytes, model_dtype) if int4_holder else None
    fp8_stems = {
        h.name.removesuffix("weight") for h in headers
        if fp8_dequantized and h.dtype.upper() in _FP8_HEADERS and len(h.shape) >= 2
        and h.name.rpartition(".")[2] == "weight"
    }
    total = 0
    count = 0
    narrow = 0
    scales = 0
    dequantized = 0
    experts = 0
    for header in headers:
        numel = math.prod(header.shape)
        code = header.dtype.upper()
        stem, _, leaf = header.name.rpartition(".")
        stem = f"{stem}." if stem else ""
        before = total
        if int4 is not None and header.name in int4.bytes_of:
            total += int4.bytes_of[header.name]
            narrow += header.name in int4.matrices
        elif leaf in _FP8_SCALE_NAMES and stem in fp8_stems:
            pass  # dropped after the weight is dequantized
        elif code in _FP8_HEADERS and stem in fp8_stems and leaf == "weight":
            total += numel * float_bytes
            narrow += 1
            dequantized += 1
        elif code in _FLOAT_HEADERS:
            quant_param = leaf in QUANT_PARAM_NAMES
            total += numel * (_QUANT_PARAM_BYTES if quant_param else float_bytes)
            scales += quant_param
        else:
            bits = _SAFETENSORS_BITS.get(code)
            if bits is None:
                raise ConfigError(
                    f"tensor {header.name!r} has safetensors dtype {header.dtype!r}, "
                    "which the memory budget does not know.",
                    "report the dtype; the budget needs its element size",
                )
            total += math.ceil(numel * bits / 8)
            if (bits <= 8 and len(header.shape) >= 2) or (
                    int4 is not None and header.name in int4.matrices):
                narrow += 1
        if ".experts." in header.name:
            experts += total - before
        count += 1
    detail = f"{count} tensors, floating point at {model_dtype}"
    if narrow:
        detail += f", {narrow} matrices stored at 8 bits or fewer"
    if dequantized:
        detail += (f", {dequantized} fp8 matrices held at {model_dtype} (dequantized at "
                   "load, their scales dropped)")
    if scales:
        detail += f", {scales} quantization scales at float32 (as held)"
    if int4_holder is not None and int4 is not None and int4.reasons:
        detail += f"; as the {int4_holder.value} holds them: " + "; ".join(int4.reasons)
    return WeightsSize(total, count, narrow > 0, detail, routed_expert_bytes=experts)


class KvLayout(enum.Enum):
    """How attention caches a token: K and V per KV head, or one MLA latent."""

    STANDARD = "standard"
    MLA = "mla"


@frozen
class KvPerToken:
    """KV-cache bytes one token takes on one device, with the formula that gave them."""

    layout: KvLayout
    bytes: int
    formula: str


def kv_bytes_per_token(
    model: ModelFacts,
    kv_dtype_bytes: int,
    tp: int = 1,
    pp: int = 1,
    speculative: SpeculativeSettings | None = None,
) -> KvPerToken:
    """Per device. Standard attention splits KV heads over TP (replicated when there are
    fewer heads than ranks); MLA caches one latent per layer on every TP rank. With a
    draft (MTP layers, an EAGLE or draft model) its layers cache every token too."""
    target = _kv_bytes_per_token(model, kv_dtype_bytes, tp, pp)
    draft = _draft_kv(model, kv_dtype_bytes, tp, speculative)
    if draft is None:
        return target
    return KvPerToken(
        target.layout,
        target.bytes + draft.bytes,
        f"{target.formula} + the draft's {draft.formula}",
    )


def _draft_kv(
    model: ModelFacts, kv_dtype_bytes: int, tp: int, spec: SpeculativeSettings | None
) -> KvPerToken | None:
    if spec is None or not spec.method:
        return None
    same_kind_layers, facts = draft_layer_facts(spec)
    if same_kind_layers:  # MTP: the target's own layer kind, on the last PP stage
        return _kv_bytes_per_token(evolve(model, num_layers=same_kind_layers), kv_dtype_bytes, tp)
    if facts is None:
        return None
    shape = evolve(
        model,
        num_layers=facts.num_layers,
        num_attention_heads=facts.num_attention_heads,
        num_kv_heads=facts.num_kv_heads,
        head_size=facts.head_size,
        mla=None,
    )
    return _kv_bytes_per_token(shape, kv_dtype_bytes, facts.tp)


def _kv_bytes_per_token(model: ModelFacts, kv_dtype_bytes: int, tp: int, pp: int = 1) -> KvPerToken:
    # A hybrid model caches K and V for its full-attention layers only; its mamba/GDN
    # layers keep one state per request, in pages of the same size (vLLM's hybrid
    # allocator: the attention layers and each group of as many state layers share them).
    counted = model.attention_layers or model.num_layers
    layers = math.ceil(counted / pp)
    layer_text = f"{layers} layers" + (f" (of {counted}, pp={pp})" if pp > 1 else "")
    if model.attention_layers is not None:
        layer_text = f"{layers} full-attention layers (of {model.num_layers})"
    if model.compressed_attention:
        # The plugin's DeepSeek-V4 class (adapters/vllm/models/deepseek_v4) caches each
        # layer's attention input and recomputes its K = V rows, compressed rows and
        # indexer keys from it: hidden_size values a token and layer, one plane.
        return KvPerToken(
            KvLayout.MLA,
            layers * model.hidden_size * kv_dtype_bytes,
            f"{layer_text} x {model.hidden_size} hidden_size x {kv_dtype_bytes} B (each "
            "layer's attention input, from which the plugin's DeepSeek-V4 class recomputes "
            "its window, compressed rows and indexer keys; not split by TP)",
        )
    if model.mla is not None:
        width = model.mla.kv_lora_rank + model.mla.qk_rope_head_dim
        indexer = model.index_head_dim if model.use_sparse else 0
        indexer_text = f" + {indexer} index_head_dim (DSA's indexer keys)" if indexer else ""
        return KvPerToken(
            KvLayout.MLA,
            layers * (width + indexer) * kv_dtype_bytes,
            f"{layer_text} x ({model.mla.kv_lora_rank} kv_lora_rank + "
            f"{model.mla.qk_rope_head_dim} qk_rope_head_dim{indexer_text}) x {kv_dtype_bytes} B "
            "(one latent, not split by TP)",
        )
    heads = max(1, model.num_kv_heads // tp)
    heads_text = f"{heads} KV heads/device"
    if model.num_kv_heads < tp:
        heads_text += f" ({model.num_kv_heads} replicated over tp={tp})"
    elif tp > 1:
        heads_text += f" ({model.num_kv_heads}/tp={tp})"
    return KvPerToken(
        KvLayout.STANDARD,
        2 * layers * heads * model.head_size * kv_dtype_bytes,
        f"2 (K,V) x {layer_text} x {heads_text} x {model.head_size} head_dim x {kv_dtype_bytes} B",
    )
