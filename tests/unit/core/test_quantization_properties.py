"""Any JSON in the model files gives a detection or a QuantizationError, never another exception."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_core.errors import QuantizationError
from ascend_core.quantization import (
    CONFIG_FILE,
    DESCRIPTION_FILE,
    QuantDetection,
    detect_quantization,
    scheme_for_layer,
)
from unit.fakes.model_files import FakeModelFiles

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=10,
)
quant_methods = st.sampled_from(
    ["fp8", "compressed-tensors", "ascend", "awq", "gptq", "", "FP8", "none"]
) | st.text(max_size=20)
configs = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {
            "quantization_config": st.one_of(
                json_values, st.fixed_dictionaries({"quant_method": quant_methods | json_values})
            )
        }
    ),
)
scheme_labels = st.sampled_from(
    ["W8A8", "W8A8_DYNAMIC", "W4A8_DYNAMIC", "W8A16", "FLOAT"]
) | st.text(max_size=10)
descriptions = st.one_of(
    st.none(),
    json_values,
    st.dictionaries(
        st.sampled_from(
            [
                "model_quant_type",
                "version",
                "m.q_proj.weight",
                "m.k_proj.weight",
                "m.v_proj.weight",
                "m.o_proj.weight",
            ]
        ),
        scheme_labels | json_values,
    ),
)
choices = st.none() | quant_methods


@settings(max_examples=80, deadline=None)
@given(config=configs, description=descriptions, choice=choices)
def test_detection_never_raises_anything_but_quantization_error(
    config: Any, description: Any, choice: str | None
) -> None:
    files = FakeModelFiles({CONFIG_FILE: config, DESCRIPTION_FILE: description})
    try:
        result = detect_quantization(files, choice)
    except QuantizationError as error:
        assert error.what
        return
    assert isinstance(result, QuantDetection)
    result.explain()
    if result.description is not None:
        for prefix in ("m.qkv_proj", "m.o_proj", "m.gate_up_proj", "other"):
            try:
                scheme_for_layer(result.description, prefix)
            except QuantizationError as error:
                assert error.what
