"""The emulated torch_npu.profiler has torch_npu 2.14.0's names and signatures (extracted
from the wheel by scripts/extract_npu_profiler_api.py), so NpuProfiler's calls, bound
against the emulator, bind against the wheel too."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import pytest

from support.torch_npu_emulator import make_torch_npu

API = json.loads(
    (
        Path(__file__).resolve().parents[2] / "support/torch_npu_emulator/profiler_api_2.14.0.json"
    ).read_text()
)


@pytest.fixture(scope="module")
def profiler():  # type: ignore[no-untyped-def]
    return make_torch_npu().profiler


def _literal(text: str | None) -> object:
    try:
        return ast.literal_eval(text) if text is not None else inspect.Parameter.empty
    except ValueError:
        return None  # a name in the wheel (Constant.LEVEL0): compared through the options


@pytest.mark.parametrize("name", sorted(API["callables"]))
def test_each_callable_takes_the_wheels_parameters(profiler, name: str) -> None:  # type: ignore[no-untyped-def]
    wheel = API["callables"][name]
    params = [p for p in inspect.signature(getattr(profiler, name)).parameters.values()
              if p.name != "self"]  # fmt: skip
    assert [p.name for p in params] == [w["name"] for w in wheel]
    for p, w in zip(params, wheel, strict=True):
        assert (p.kind is inspect.Parameter.KEYWORD_ONLY) == w["keyword_only"], p.name
        expected = _literal(w["default"])
        if expected is not None or w["default"] == "None":
            assert p.default == expected, (name, p.name)


@pytest.mark.parametrize("cls", sorted(API["options"]))
def test_the_option_constants_are_the_wheels(profiler, cls: str) -> None:  # type: ignore[no-untyped-def]
    ours = {k: v for k, v in vars(getattr(profiler, cls)).items() if not k.startswith("_")}
    assert ours == API["options"][cls]


def test_the_experimental_configs_defaults_are_the_wheels_constants(profiler) -> None:  # type: ignore[no-untyped-def]
    defaults = inspect.signature(profiler._ExperimentalConfig).parameters
    assert defaults["profiler_level"].default == API["options"]["ProfilerLevel"]["Level0"]
    pipe = API["options"]["AiCMetrics"]["PipeUtilization"]
    assert defaults["aic_metrics"].default == pipe
    assert defaults["export_type"].default == API["options"]["ExportType"]["Text"]


def test_only_names_the_wheel_has_are_reachable(profiler) -> None:  # type: ignore[no-untyped-def]
    ours = {n for n in vars(profiler) if not n.startswith("__")}
    assert ours <= set(API["all"]), ours - set(API["all"])
    assert {"profile", "ProfilerActivity", "tensorboard_trace_handler", "schedule"} <= ours
