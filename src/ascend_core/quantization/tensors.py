"""The tensors each ModelSlim linear scheme stores per layer, and their allowed dtypes."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from attrs import frozen

from ascend_core.errors import QuantizationError
from ascend_core.quantization.modelslim import DESCRIPTION_FILE, QuantScheme

FLOATS = ("float32", "bfloat16", "float16")


@frozen
class SchemeTensor:
    """One tensor `<prefix>.<suffix>` of a quantized linear layer."""

    suffix: str
    dtypes: tuple[str, ...]
    required: bool = True
    meaning: str = ""


# W4A8_DYNAMIC (ModelSlim's per-channel layout, version 1.0.0, as
# vllm-project/vllm-ascend reads it), linear layers and MoE experts alike: int4 values packed
# two per int8 byte along the output dimension (the even channel in the low nibble), a
# float per-channel scale and zero offset, and scale_bias = 8 * weight_scale * sum over the
# input features of the int4 row, the correction the NPU's int8 x int4 grouped matmul takes
# ([out, 1] for column-parallel layers and gate_proj / up_proj; [out, 16] for row-parallel
# layers and down_proj: 16 partial sums over equal slices of the inputs).
W4A8_TENSORS: tuple[SchemeTensor, ...] = (
    SchemeTensor("weight", ("int8",), meaning="int4 pairs in int8 [out / 2, in]"),
    SchemeTensor("weight_scale", FLOATS, meaning="per-channel weight scale [out, 1]"),
    SchemeTensor("weight_offset", FLOATS, meaning="weight zero point [out, 1] (zeros)"),
    SchemeTensor("scale_bias", ("float32",),
                 meaning="8 * weight_scale * row sum, [out, 1] (row-parallel layers and "
                 "down_proj [out, 16])"),
)


# W8A8: deq_scale is float32, or (float16 models) int64 holding the float32 bits;
# input_offset is int8 in newer exports and the model's float dtype in older ones;
# weight_scale / weight_offset appear in older exports only (deq_scale carries them).
SCHEME_TENSORS: Mapping[QuantScheme, tuple[SchemeTensor, ...]] = MappingProxyType(
    {
        QuantScheme.W8A8: (
            SchemeTensor("weight", ("int8",), meaning="int8 weight [n, k]"),
            SchemeTensor("input_scale", FLOATS, meaning="per-tensor activation scale"),
            SchemeTensor("input_offset", ("int8", *FLOATS), meaning="activation zero point"),
            SchemeTensor("quant_bias", ("int32",), meaning="int32 folded bias [n]"),
            SchemeTensor("deq_scale", ("float32", "int64"), meaning="dequant scale [n]"),
            SchemeTensor("weight_scale", FLOATS, required=False),
            SchemeTensor("weight_offset", FLOATS, required=False),
        ),
        QuantScheme.W8A8_DYNAMIC: (
            SchemeTensor("weight", ("int8",), meaning="int8 weight [n, k]"),
            SchemeTensor("weight_scale", FLOATS, meaning="per-channel weight scale [n, 1]"),
            SchemeTensor("weight_offset", FLOATS, meaning="weight zero point [n, 1] (zeros)"),
        ),
        # W8A16 (weight only): W = (weight - weight_offset) * weight_scale per output
        # channel; ModelSlim writes the scale and offset [n] (older) or [n, 1].
        QuantScheme.W8A16: (
            SchemeTensor("weight", ("int8",), meaning="int8 weight [n, k]"),
            SchemeTensor("weight_scale", FLOATS, meaning="per-channel weight scale [n, 1]"),
            SchemeTensor("weight_offset", FLOATS,
                         meaning="per-channel zero point [n, 1] (subtracted from weight)"),
        ),
        QuantScheme.W4A8_DYNAMIC: W4A8_TENSORS,
    }
)


def expert_tensors(scheme: QuantScheme) -> tuple[SchemeTensor, ...]:
    """The per-expert tensors of a MoE method's scheme (W8A8_DYNAMIC or W4A8_DYNAMIC)."""
    return scheme_tensors(scheme)


def scheme_tensors(scheme: QuantScheme) -> tuple[SchemeTensor, ...]:
    """The tensors of `scheme`; a QuantizationError for a scheme no linear method serves."""
    found = SCHEME_TENSORS.get(scheme)
    if found is None:
        served = ", ".join(s.value for s in SCHEME_TENSORS)
        raise QuantizationError(
            f"{DESCRIPTION_FILE}: scheme {scheme.value} has no linear method in this plugin.",
            f"Linear layers are served as {served} or FLOAT; re-export with one of them.",
        )
    return found


def check_dtype(tensor: SchemeTensor, name: str, dtype: str, scheme: QuantScheme) -> None:
    """A QuantizationError naming the checkpoint tensor when its dtype is not allowed."""
    if dtype not in tensor.dtypes:
        raise QuantizationError(
            f"Checkpoint tensor {name} is {dtype}, but a {scheme.value} layer stores "
            f"{tensor.suffix} as {' or '.join(tensor.dtypes)}"
            + (f" ({tensor.meaning})." if tensor.meaning else "."),
            f"Re-export the model with ModelSlim, or check that {DESCRIPTION_FILE} names "
            "the scheme this tensor was exported with.",
        )


def missing_tensor(name: str, tensor: SchemeTensor, scheme: QuantScheme) -> QuantizationError:
    """The error for a required tensor the checkpoint does not hold."""
    return QuantizationError(
        f"Checkpoint has no tensor {name}, which a {scheme.value} layer needs"
        + (f" ({tensor.meaning})." if tensor.meaning else "."),
        f"The export is incomplete or {DESCRIPTION_FILE} names the wrong scheme for this "
        "layer; re-export the model with ModelSlim.",
    )
