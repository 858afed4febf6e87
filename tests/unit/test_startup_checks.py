"""The arguments vLLM would fail on with a traceback, refused first with the doctor's
errors (adapters.vllm.engine.startup_errors, without vLLM), and the decline reason with a
misspelling."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from adapters.vllm.engine.startup_errors import (
    StartupError,
    check_before_start,
    decline_reason,
    refuse_before_start,
)
from ascend_core.errors import ConfigError, QuantizationError
from ascend_core.preflight import MissingModelError
from ascend_core.quantization import detect_quantization
from unit.fakes.environment import FakeEnvironment
from unit.fakes.model_files import FakeModelFiles
from unit.fakes.upstream import FakeUpstream

PLAIN = FakeModelFiles({"config.json": {"model_type": "llama"}}, location="/m/plain")
MISSING = FakeModelFiles(location="/m/none", exists=False)


def test_a_missing_local_path_is_refused_before_any_hub_lookup() -> None:
    with pytest.raises(MissingModelError, match=r"^\./models/x does not exist"):
        check_before_start("./models/x", None, MISSING)


def test_a_hub_id_without_a_local_directory_is_left_to_vllm() -> None:
    check_before_start("Qwen/Qwen3-0.6B", "ascend", MISSING)  # nothing raised


def test_ascend_quantization_without_a_description_is_the_doctors_error() -> None:
    with pytest.raises(QuantizationError) as serve:
        check_before_start("/m/plain", "ascend", PLAIN)
    with pytest.raises(QuantizationError) as doctor:
        detect_quantization(PLAIN, "ascend")
    assert str(serve.value) == str(doctor.value)
    assert "needs quant_model_description.json" in serve.value.what


def test_other_methods_are_left_to_the_plan() -> None:
    check_before_start("/m/plain", "fp8", PLAIN)
    check_before_start("/m/plain", None, PLAIN)


def test_on_engine_args_it_stops_with_the_message_alone() -> None:
    args = SimpleNamespace(model="/nonexistent/model-dir", quantization=None)
    with pytest.raises(StartupError) as stop:
        refuse_before_start(args, lambda name: MISSING)
    assert str(stop.value.code).startswith("vllm-plugin-ascend: /nonexistent/model-dir does")
    refuse_before_start(SimpleNamespace(model=None), lambda name: MISSING)  # no model: no check


SUFFIX_TREES = "arctic_inference.suffix_decoding:SuffixDecodingCache"


def test_suffix_without_its_package_is_refused_before_vllms_import_error() -> None:
    """vLLM's SpeculativeConfig raises ImportError naming `pip install arctic-inference`,
    which builds it in isolation against PyPI's CUDA torch: ours comes first."""
    absent = FakeUpstream()
    with pytest.raises(ConfigError, match=r"arctic_inference\.suffix_decoding") as refused:
        check_before_start("/m/plain", None, PLAIN, "suffix", absent)
    assert "--no-build-isolation" in refused.value.hint
    assert absent.asked == [SUFFIX_TREES]
    args = SimpleNamespace(model="/m/plain", quantization=None,
                           speculative_config={"method": "suffix"})
    with pytest.raises(StartupError, match="`spec` extra"):
        refuse_before_start(args, lambda name: PLAIN, absent)


def test_suffix_with_its_package_and_other_methods_pass_without_asking() -> None:
    present = FakeUpstream(symbols=[SUFFIX_TREES])
    check_before_start("/m/plain", None, PLAIN, "suffix", present)
    check_before_start("/m/plain", None, PLAIN, "ngram", present)
    assert present.asked == [SUFFIX_TREES]  # ngram needs no package


def test_the_decline_reason_flags_a_misspelt_device_variable() -> None:
    env = FakeEnvironment({"VLLM_ASCEND_DEVICES": "cpu"})
    reason = decline_reason("Ascend plugin declines: no NPU.", env)
    assert reason.startswith("Ascend plugin declines: no NPU. VLLM_ASCEND_DEVICES is set")
    assert "Did you mean 'VLLM_ASCEND_DEVICE'?" in reason
    assert decline_reason("declines.", FakeEnvironment({})) == "declines."
