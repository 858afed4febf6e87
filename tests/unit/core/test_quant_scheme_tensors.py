"""The core's table of what each ModelSlim linear scheme stores, and its errors."""

from __future__ import annotations

import pytest

from ascend_core.errors import QuantizationError
from ascend_core.quantization import QuantScheme
from ascend_core.quantization.tensors import (
    check_dtype,
    missing_tensor,
    scheme_tensors,
)


def _by_suffix(scheme: QuantScheme) -> dict[str, object]:
    return {t.suffix: t for t in scheme_tensors(scheme)}


def test_w8a8_needs_int8_weights_int32_bias_and_float32_or_int64_deq_scale() -> None:
    tensors = _by_suffix(QuantScheme.W8A8)
    assert {s for s, t in tensors.items() if t.required} == {
        "weight", "input_scale", "input_offset", "quant_bias", "deq_scale"
    }
    assert tensors["weight"].dtypes == ("int8",)
    assert tensors["quant_bias"].dtypes == ("int32",)
    assert tensors["deq_scale"].dtypes == ("float32", "int64")
    assert not tensors["weight_scale"].required  # older exports only


def test_dynamic_needs_weight_scale_and_offset() -> None:
    assert [t.suffix for t in scheme_tensors(QuantScheme.W8A8_DYNAMIC)] == [
        "weight", "weight_scale", "weight_offset"
    ]


def test_wrong_dtype_names_the_tensor_and_what_was_expected() -> None:
    weight = _by_suffix(QuantScheme.W8A8)["weight"]
    check_dtype(weight, "x.weight", "int8", QuantScheme.W8A8)
    with pytest.raises(QuantizationError) as err:
        check_dtype(weight, "model.layers.3.mlp.down_proj.weight", "bfloat16", QuantScheme.W8A8)
    assert str(err.value).startswith(
        "Checkpoint tensor model.layers.3.mlp.down_proj.weight is bfloat16, but a W8A8 layer "
        "stores weight as int8 (int8 weight [n, k])."
    )


def test_missing_tensor_message() -> None:
    tensor = _by_suffix(QuantScheme.W8A8_DYNAMIC)["weight_scale"]
    err = missing_tensor("a.weight_scale", tensor, QuantScheme.W8A8_DYNAMIC)
    assert "Checkpoint has no tensor a.weight_scale, which a W8A8_DYNAMIC layer needs" in str(err)


def test_w4a8_stores_packed_int4_pairs_scales_and_a_float32_scale_bias() -> None:
    tensors = _by_suffix(QuantScheme.W4A8_DYNAMIC)
    assert list(tensors) == ["weight", "weight_scale", "weight_offset", "scale_bias"]
    assert all(t.required for t in tensors.values())
    assert tensors["weight"].dtypes == ("int8",) and "[out / 2, in]" in tensors["weight"].meaning
    assert tensors["scale_bias"].dtypes == ("float32",)


@pytest.mark.parametrize("scheme", [QuantScheme.FLOAT])
def test_schemes_without_a_linear_method_are_refused(scheme: QuantScheme) -> None:
    with pytest.raises(QuantizationError, match=f"{scheme.value} has no linear method"):
        scheme_tensors(scheme)
