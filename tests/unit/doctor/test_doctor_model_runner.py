"""`ascend-doctor plan` shows the model runner the worker builds and why, with
VLLM_USE_V2_MODEL_RUNNER=1 eager or with graphs (the plan's decision,
ascend_core/plan/model_runner.py)."""

from __future__ import annotations

import json

from unit.doctor.test_cli import _llama, fake_parse, plan_json, run, wiring


def test_plan_shows_the_model_runner_and_why_and_v2_asked_with_the_plans_graphs() -> None:
    _, data = plan_json(["/m/llama"], _llama())
    runner = data["data"]["model_runner"]
    assert runner["runner"] == "V1" and "issue 48" in runner["reason"]
    (section,) = [s for s in data["sections"] if s["title"] == "config plan"]
    items = {i["name"]: i["detail"] for i in section["items"]}
    assert items["model runner"] == f"V1: {runner['reason']}"
    assert "env.VLLM_USE_V2_MODEL_RUNNER" in items  # vLLM's engine is told the same
    # Asked for V2 with the plan's graphs (FULL_AND_PIECEWISE for Llama): V2 with them.
    c = wiring(env={"VLLM_USE_V2_MODEL_RUNNER": "1"}, files=_llama())
    _, out = run(["plan", "--json", "--", "/m/llama"], c)
    asked = json.loads(out)
    (section,) = [s for s in asked["sections"] if s["title"] == "config plan"]
    warnings = [i["detail"] for i in section["items"] if i["name"] == "warning"]
    assert not any("model runner" in w for w in warnings)
    runner = asked["data"]["model_runner"]
    assert runner["runner"] == "V2"
    assert "FULL_AND_PIECEWISE graphs on the NPU's" in runner["reason"]


def test_plan_shows_v2_with_full_decode_graphs() -> None:
    c = wiring(env={"VLLM_USE_V2_MODEL_RUNNER": "1"}, files=_llama())
    full = {"cudagraph_mode": "FULL_DECODE_ONLY"}
    c.serve_args_parser.override(lambda argv: {**fake_parse(argv), "compilation_config": full})
    _, out = run(["plan", "--json", "--", "/m/llama"], c)
    runner = json.loads(out)["data"]["model_runner"]
    assert runner["runner"] == "V2", runner
    assert "FULL_DECODE_ONLY graphs on the NPU's" in runner["reason"]


def test_plan_shows_v2_and_its_kernels_table_when_v2_is_served() -> None:
    c = wiring(env={"VLLM_USE_V2_MODEL_RUNNER": "1"}, files=_llama())
    c.serve_args_parser.override(lambda argv: {**fake_parse(argv), "enforce_eager": True})
    _, out = run(["plan", "--json", "--", "/m/llama"], c)
    data = json.loads(out)
    runner = data["data"]["model_runner"]
    assert runner["runner"] == "V2" and "NpuModelRunnerV2, eager" in runner["reason"]
    kernels = runner["kernels"]
    assert len(kernels) == 103 and {k["path"] for k in kernels} == {"triton-ascend"}
    assert any(k["kernel"] == "input_batch._prepare_prefill_inputs_kernel" for k in kernels)
    (section,) = [s for s in data["sections"] if s["title"] == "config plan"]
    items = {i["name"]: i["detail"] for i in section["items"]}
    assert items["V2 kernels"].startswith("vLLM 0.33.0's V2 runner: 103 Triton functions")
    assert not [i for i in section["items"] if i["name"] == "warning" and "runner" in i["detail"]]
