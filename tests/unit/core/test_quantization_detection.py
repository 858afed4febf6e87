"""detect_quantization: which file and key decide the method, user choices, and errors."""

from __future__ import annotations

import pytest

from ascend_core.errors import QuantizationError
from ascend_core.quantization import (
    CONFIG_FILE,
    DESCRIPTION_FILE,
    DecidedBy,
    Evidence,
    QuantMethod,
    detect_quantization,
)
from unit.fakes.model_files import FakeModelFiles

DESCRIPTION = {
    "model_quant_type": "W8A8",
    "version": "1.0.0",
    "model.layers.0.self_attn.q_proj.weight": "W8A8",
}


def config(method: object) -> dict[str, object]:
    return {"architectures": ["Qwen2ForCausalLM"], "quantization_config": {"quant_method": method}}


def test_no_quantization_files_means_none_and_says_what_was_missing() -> None:
    files = FakeModelFiles({CONFIG_FILE: {"architectures": ["LlamaForCausalLM"]}})
    result = detect_quantization(files, None)
    assert result.method is QuantMethod.NONE
    assert result.decided_by is DecidedBy.NOTHING_FOUND
    assert DESCRIPTION_FILE in str(result.evidence)
    assert "quantization_config" in str(result.evidence)
    assert result.warnings == ()
    assert result.description is None


def test_no_files_at_all_means_none() -> None:
    assert detect_quantization(FakeModelFiles(), None).method is QuantMethod.NONE


def test_modelslim_description_means_ascend_and_is_parsed() -> None:
    files = FakeModelFiles({DESCRIPTION_FILE: DESCRIPTION, CONFIG_FILE: {}})
    result = detect_quantization(files, None)
    assert result.method is QuantMethod.ASCEND
    assert result.decided_by is DecidedBy.MODEL_FILES
    assert result.evidence.source == DESCRIPTION_FILE
    assert "model_quant_type = W8A8" in str(result.evidence)
    assert result.description is not None
    assert result.description.model_quant_type == "W8A8"
    assert result.description.version == "1.0.0"
    assert result.files_say is QuantMethod.ASCEND


@pytest.mark.parametrize(
    ("raw", "method"),
    [
        ("compressed-tensors", QuantMethod.COMPRESSED_TENSORS),
        ("fp8", QuantMethod.FP8),
        ("FP8", QuantMethod.FP8),
    ],
)
def test_config_quant_method_names_the_method_and_the_key(raw: str, method: QuantMethod) -> None:
    result = detect_quantization(FakeModelFiles({CONFIG_FILE: config(raw)}), None)
    assert result.method is method
    assert result.evidence == Evidence(CONFIG_FILE, "quantization_config.quant_method", raw)
    assert str(result.evidence) == f'config.json: quantization_config.quant_method = "{raw}"'


def test_description_wins_over_a_disagreeing_config_with_a_warning() -> None:
    files = FakeModelFiles({DESCRIPTION_FILE: DESCRIPTION, CONFIG_FILE: config("fp8")})
    result = detect_quantization(files, None)
    assert result.method is QuantMethod.ASCEND
    assert len(result.warnings) == 1
    assert "fp8" in result.warnings[0] and DESCRIPTION_FILE in result.warnings[0]


def test_user_choice_wins_over_files_with_a_warning() -> None:
    files = FakeModelFiles({CONFIG_FILE: config("compressed-tensors")})
    result = detect_quantization(files, "fp8")
    assert result.method is QuantMethod.FP8
    assert result.decided_by is DecidedBy.USER_CHOICE
    assert result.evidence == Evidence("user choice", "quantization", "fp8")
    assert result.files_say is QuantMethod.COMPRESSED_TENSORS
    assert any("compressed-tensors" in w and "choice wins" in w for w in result.warnings)


def test_user_choice_agreeing_with_files_gives_no_warning() -> None:
    files = FakeModelFiles({DESCRIPTION_FILE: DESCRIPTION})
    result = detect_quantization(files, "ascend")
    assert result.method is QuantMethod.ASCEND
    assert result.decided_by is DecidedBy.USER_CHOICE
    assert result.warnings == ()
    assert result.description is not None


def test_fp8_on_unquantized_weights_is_allowed_with_a_warning() -> None:
    result = detect_quantization(FakeModelFiles({CONFIG_FILE: {}}), " FP8 ")
    assert result.method is QuantMethod.FP8
    assert result.files_say is QuantMethod.NONE
    assert len(result.warnings) == 1


def test_blank_user_choice_means_detect() -> None:
    files = FakeModelFiles({CONFIG_FILE: config("fp8")})
    assert detect_quantization(files, "  ").decided_by is DecidedBy.MODEL_FILES


def test_unknown_user_choice_is_an_error_with_did_you_mean() -> None:
    with pytest.raises(QuantizationError) as info:
        detect_quantization(FakeModelFiles(), "compresed-tensors")
    assert "quantization='compresed-tensors'" in info.value.what
    assert "Did you mean 'compressed-tensors'?" in info.value.hint


def test_none_is_not_a_user_choice() -> None:
    with pytest.raises(QuantizationError) as info:
        detect_quantization(FakeModelFiles(), "none")
    assert "leave it unset" in info.value.hint


@pytest.mark.parametrize("choice", ["awq", "gptq", "bitsandbytes"])
def test_cuda_only_user_choice_is_unsupported_with_a_hint(choice: str) -> None:
    with pytest.raises(QuantizationError) as info:
        detect_quantization(FakeModelFiles(), choice)
    assert "CUDA" in info.value.what
    assert "ModelSlim" in info.value.hint


@pytest.mark.parametrize("method", ["awq", "gptq", "gptq_marlin"])
def test_cuda_only_config_method_is_an_error_naming_file_and_key(method: str) -> None:
    with pytest.raises(QuantizationError) as info:
        detect_quantization(FakeModelFiles({CONFIG_FILE: config(method)}), None)
    assert f'config.json: quantization_config.quant_method = "{method}"' in info.value.what
    assert "ModelSlim" in info.value.hint


def test_unknown_config_method_is_an_error_with_did_you_mean() -> None:
    with pytest.raises(QuantizationError) as info:
        detect_quantization(FakeModelFiles({CONFIG_FILE: config("fp9")}), None)
    assert "fp9" in info.value.what
    assert "Did you mean 'fp8'?" in info.value.hint


def test_ascend_without_description_is_an_error() -> None:
    with pytest.raises(QuantizationError) as info:
        detect_quantization(FakeModelFiles({CONFIG_FILE: {}}, location="/m/q"), "ascend")
    assert DESCRIPTION_FILE in info.value.what and "/m/q" in info.value.what


def test_config_naming_ascend_without_description_is_an_error() -> None:
    with pytest.raises(QuantizationError) as info:
        detect_quantization(FakeModelFiles({CONFIG_FILE: config("ascend")}), None)
    assert DESCRIPTION_FILE in info.value.what


def test_compressed_tensors_choice_without_quantization_config_is_an_error() -> None:
    with pytest.raises(QuantizationError) as info:
        detect_quantization(FakeModelFiles({CONFIG_FILE: {}}), "compressed-tensors")
    assert "quantization_config" in info.value.what


@pytest.mark.parametrize(
    ("files", "fragment"),
    [
        ({CONFIG_FILE: ["not", "an", "object"]}, "config.json holds a JSON list"),
        ({CONFIG_FILE: {"quantization_config": "fp8"}}, "quantization_config is a JSON str"),
        ({CONFIG_FILE: {"quantization_config": {}}}, "quant_method is missing"),
        ({CONFIG_FILE: config(8)}, "quant_method is a JSON int"),
        ({DESCRIPTION_FILE: [1, 2]}, "quant_model_description.json holds a JSON list"),
    ],
)
def test_malformed_files_are_quantization_errors(files: dict[str, object], fragment: str) -> None:
    with pytest.raises(QuantizationError) as info:
        detect_quantization(FakeModelFiles(files), None)
    assert fragment in info.value.what
    assert info.value.hint


def test_explain_names_method_source_and_warnings() -> None:
    files = FakeModelFiles({CONFIG_FILE: config("compressed-tensors")})
    text = detect_quantization(files, "fp8").explain()
    assert text.startswith("quantization: fp8 (user choice:")
    assert "warning:" in text
