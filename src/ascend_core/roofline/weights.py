"""The width the roofline reads the decoder layers' linear weights at, from the
quantization the files declare."""

from __future__ import annotations

from attrs import frozen

from ascend_core.quantization import QuantMethod, QuantScheme


@frozen
class WeightFormat:
    """Bytes per linear weight, whether its matmuls run on the int8 cube, and why."""

    bytes_per_weight: float
    int8_compute: bool
    label: str


_SCHEMES: dict[QuantScheme, tuple[float, bool]] = {
    QuantScheme.W8A8: (1, True),
    QuantScheme.W8A8_DYNAMIC: (1, True),
    QuantScheme.W4A8_DYNAMIC: (0.5, True),
    QuantScheme.W8A16: (1, False),
}


def weight_format(
    method: QuantMethod, scheme: QuantScheme | None, float_bytes: int
) -> WeightFormat:
    """ModelSlim: its model_quant_type (FLOAT or unknown: the model dtype);
    compressed-tensors: int8 W8A8; fp8: the model dtype (its weights are dequantized at
    load: ascend_core.quantization.fp8); none: the model dtype."""
    if method is QuantMethod.ASCEND and scheme in _SCHEMES:
        width, int8 = _SCHEMES[scheme]
        return WeightFormat(width, int8, f"{scheme.value}: {width:g} B a weight")
    if method is QuantMethod.COMPRESSED_TENSORS:
        return WeightFormat(1, True, "compressed-tensors (taken as int8 W8A8): 1 B a weight")
    if method is QuantMethod.FP8:
        return WeightFormat(float_bytes, False,
                            f"fp8, dequantized at load: {float_bytes} B a weight")
    return WeightFormat(float_bytes, False, f"not quantized: {float_bytes} B a weight")
