"""configure's runner variable: written before vLLM builds its config, the operator's value
kept for the plan (what `ascend-doctor plan` reads from the environment)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from adapters.vllm.engine import configure
from ascend_core.errors import ConfigError
from ascend_core.plan import plan_config
from ports.device import DeviceKind
from unit.core.plan_fixtures import npu


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    """configure remembers this process's write; each case starts as a fresh process."""
    kept = dict(configure._runner_variable)
    configure._runner_variable.clear()
    yield
    configure._runner_variable.clear()
    configure._runner_variable.update(kept)


@pytest.mark.parametrize(
    ("kind", "given", "written"),
    [
        (DeviceKind.NPU, None, "0"),
        (DeviceKind.NPU, "1", "1"),  # the NPU's V2 runner (eager; the plan may say V1)
        (DeviceKind.CPU, "1", "0"),  # the host builds V1 only
        (DeviceKind.NPU, "0", "0"),
    ],
)
def test_before_config_writes_the_runner_and_keeps_what_the_operator_gave(
    kind: DeviceKind, given: str | None, written: str
) -> None:
    environ = {} if given is None else {"VLLM_USE_V2_MODEL_RUNNER": given}
    configure.before_config(kind, environ)
    assert environ["VLLM_USE_V2_MODEL_RUNNER"] == written
    assert environ[configure.BREAKABLE_GRAPHS] == "0"
    assert configure.operator_runner_variable(environ.get("VLLM_USE_V2_MODEL_RUNNER")) == given


def test_a_value_set_after_the_write_is_the_operators() -> None:
    environ: dict[str, str] = {}
    configure.before_config(DeviceKind.CPU, environ)
    environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"  # a later engine of the same process
    assert configure.operator_runner_variable(environ.get("VLLM_USE_V2_MODEL_RUNNER")) == "1"
    configure.before_config(DeviceKind.CPU, environ)
    assert configure.operator_runner_variable(environ.get("VLLM_USE_V2_MODEL_RUNNER")) == "1"


class _Config:
    """Stands in for VllmConfig's use_v2_model_runner property (vLLM's, not ours)."""

    def __init__(self, v2: bool | Exception) -> None:
        self._v2 = v2

    @property
    def use_v2_model_runner(self) -> bool:
        if isinstance(self._v2, Exception):
            raise self._v2
        return self._v2


def test_the_engine_believing_v2_is_a_typed_refusal() -> None:
    plan = plan_config(npu())
    configure.require_runner_agrees(_Config(False), plan)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as believes_v2:
        configure.require_runner_agrees(_Config(True), plan)  # type: ignore[arg-type]
    assert "vLLM's engine would run model runner V2" in believes_v2.value.what
    assert "HiSparse" in believes_v2.value.hint
    refused = ValueError("HiSparse requires Model Runner V2; remove VLLM_USE_V2_MODEL_RUNNER=0.")
    with pytest.raises(ConfigError) as hisparse:
        configure.require_runner_agrees(_Config(refused), plan)  # type: ignore[arg-type]
    assert "HiSparse requires Model Runner V2" in hisparse.value.what


def test_v2_without_an_active_triton_driver_is_a_typed_refusal() -> None:
    plan = plan_config(npu(v2_model_runner="1", compilation={"enforce_eager": True}))
    configure.require_runner_agrees(_Config(True), plan, has_triton=True)  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as no_triton:
        configure.require_runner_agrees(_Config(True), plan, has_triton=False)  # type: ignore[arg-type]
    assert "Triton has no active driver" in no_triton.value.what
    assert "triton-ascend" in no_triton.value.hint


def test_before_config_falls_back_as_the_plan_does_from_the_engine_args() -> None:
    """The features the NPU's V2 runner does not serve are read from vLLM's EngineArgs
    before its config exists: the variable vLLM's engine reads first already says V1."""
    from types import SimpleNamespace

    from ascend_core.plan.runner_features import RunnerFeatures
    from unit.fakes.model_files import FakeModelFiles

    args = SimpleNamespace(
        speculative_config={"model": "/draft", "num_speculative_tokens": 2},
        enable_lora=True,
        enable_sleep_mode=True,
        kv_transfer_config=object(),
        tensor_parallel_size=2,
    )
    kinds = ["linear_attention", "full_attention"]
    hybrid = FakeModelFiles({"config.json": {"layer_types": kinds}})
    features = configure.runner_features(args, hybrid)
    assert features == RunnerFeatures("the method vLLM infers", True, True)
    plain = configure.runner_features(SimpleNamespace(), FakeModelFiles(exists=False))
    assert plain == RunnerFeatures()
    for one in (RunnerFeatures(kv_transfer=True), RunnerFeatures(hybrid=True)):
        environ = {"VLLM_USE_V2_MODEL_RUNNER": "1"}
        configure.before_config(DeviceKind.NPU, environ, one)
        assert environ["VLLM_USE_V2_MODEL_RUNNER"] == "0", one
    environ = {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    configure.before_config(DeviceKind.NPU, environ, plain)
    assert environ["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    # TP > 1, sleep mode and LoRA are served on V2: not features the decision reads.
    served = SimpleNamespace(tensor_parallel_size=2, enable_sleep_mode=True, enable_lora=True)
    assert configure.runner_features(served, None) == plain


def test_the_model_files_are_read_early_only_where_the_runner_decision_reads_them() -> None:
    """The host builds V1 and V1 is the default: neither reads the model's files before
    the one translation does; the NPU with V2 asked for does (a hybrid model turns it to
    V1 before vLLM's config exists)."""
    assert configure.features_matter(DeviceKind.NPU, {"VLLM_USE_V2_MODEL_RUNNER": "1"})
    assert not configure.features_matter(DeviceKind.NPU, {"VLLM_USE_V2_MODEL_RUNNER": "0"})
    assert not configure.features_matter(DeviceKind.NPU, {})
    assert not configure.features_matter(DeviceKind.CPU, {"VLLM_USE_V2_MODEL_RUNNER": "1"})
