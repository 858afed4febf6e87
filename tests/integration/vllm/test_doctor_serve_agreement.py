"""`ascend-doctor plan` and `vllm serve` reach the same verdict from the same inputs.

Each row is a `vllm serve` argv (on the host device, as these tests run). The doctor runs
in this process on the same container; the serving side is vLLM's own parser, then
EngineArgs -> VllmConfig, which runs our platform's check_and_update_config. Both must
refuse, or both accept.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from adapters.container import container
from adapters.doctor.cli import main as doctor_main
from adapters.vllm.engine.doctor_args import _serve_parser

TINY = "<tiny>"  # replaced by the tiny Qwen3 model directory

# (id, argv after `vllm serve`, both refuse?)
ROWS: list[tuple[str, list[str], bool]] = [
    ("plain", [TINY], False),
    ("additional_config not JSON", [TINY, "--additional-config", "{not json"], True),
    ("additional_config a list", [TINY, "--additional-config", "[1,2]"], True),
    ("additional_config bad value",
     [TINY, "--additional-config", json.dumps({"ascend_compilation_config":
                                               {"enable_npugraph_ex": "yes"}})], True),
    ("additional_config unknown key", [TINY, "--additional-config", '{"enable_kv_nzz": true}'],
     True),
    ("max_model_len beyond the model", [TINY, "--max-model-len", "16384"], True),
    ("max_model_len within", [TINY, "--max-model-len", "256"], False),
    ("sleep mode", [TINY, "--enable-sleep-mode"], False),
    ("lora", [TINY, "--enable-lora", "--max-loras", "2", "--max-lora-rank", "8"], False),
    ("lora on quantized layers", [TINY, "--enable-lora", "--quantization", "fp8"], True),
    ("speculative ngram",
     [TINY, "--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 2,
                                                "prompt_lookup_max": 3})], False),
    ("speculative k too large",
     [TINY, "--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 16,
                                                "prompt_lookup_max": 3})], True),
    ("speculative unserved method",
     [TINY, "--speculative-config", json.dumps({"method": "medusa", "model": TINY,
                                                "num_speculative_tokens": 2})], True),
    ("GPU-only quantization", [TINY, "--quantization", "awq"], True),
    ("GPU-only KV cache dtype", [TINY, "--kv-cache-dtype", "fp8"], True),
    ("not a number", [TINY, "--tensor-parallel-size", "two"], True),
    ("missing model directory", ["/nonexistent/model-dir"], True),
    ("missing relative model directory", ["./models/no-such-model"], True),
    ("tensor parallel 2 on the host", [TINY, "--tensor-parallel-size", "2"], False),
    ("ascend quantization of an unquantized model", [TINY, "--quantization", "ascend"], True),
]  # fmt: skip


def _argv(argv: list[str], tiny: str) -> list[str]:
    return [tiny if a == TINY else a for a in argv]


def doctor_refuses(argv: list[str]) -> tuple[bool, str]:
    out = io.StringIO()
    code = doctor_main(["plan", "--json", "--", *argv], root=container(), stdout=out)
    return code == 2, out.getvalue()


def serve_refuses(argv: list[str]) -> tuple[bool, str]:
    from vllm.engine.arg_utils import AsyncEngineArgs

    saved = dict(os.environ)
    try:
        ns = _serve_parser().parse_args(argv)
        ns.model = ns.model_tag or ns.model
        AsyncEngineArgs.from_cli_args(ns).create_engine_config()
    except (Exception, SystemExit) as exc:  # any refusal counts
        return True, f"{type(exc).__name__}: {exc}"
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return False, ""


@pytest.mark.parametrize(("argv", "refused"), [(a, r) for _, a, r in ROWS],
                         ids=[i for i, _, _ in ROWS])  # fmt: skip
def test_doctor_and_serve_agree(model_dirs: dict[str, str], argv: list[str], refused: bool) -> None:
    argv = _argv(argv, model_dirs["qwen3"])
    by_doctor, report = doctor_refuses(argv)
    by_serve, error = serve_refuses(argv)
    assert (by_doctor, by_serve) == (refused, refused), (report[-1500:], error[-1500:])


# The attention rows: the tiny Qwen3 with config.json edited, or an environment variable
# set. (id, config.json edits, environment, what the doctor's refusal names)
ATTENTION_ROWS: list[tuple[str, dict[str, Any], dict[str, str], str]] = [
    ("batch-invariant (vLLM's switch)", {}, {"VLLM_BATCH_INVARIANT": "1"}, "batch-invariant"),
    ("batch-invariant (ours)", {}, {"VLLM_ASCEND_TRAINING_CONSISTENCY": "1"}, "batch-invariant"),
    # Sliding windows and sinks (gpt-oss) are served by the paged backend on both devices
    # (tests/integration/vllm/test_gpt_oss_generate.py).
]  # fmt: skip


def _variant(tiny: str, edits: dict[str, Any], where: Path) -> str:
    if not edits:
        return tiny
    target = where / "model"
    shutil.copytree(tiny, target)
    config = json.loads((target / "config.json").read_text())
    config.update(edits)
    (target / "config.json").write_text(json.dumps(config))
    return str(target)


def _attention_items(report: str) -> list[dict[str, Any]]:
    sections = json.loads(report)["sections"]
    return next(s["items"] for s in sections if s["title"] == "attention")


@pytest.mark.parametrize(("edits", "env", "named"), [(e, v, n) for _, e, v, n in ATTENTION_ROWS],
                         ids=[i for i, _, _, _ in ATTENTION_ROWS])  # fmt: skip
def test_doctor_and_serve_refuse_what_the_attention_backends_cannot_do(
    model_dirs: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    edits: dict[str, Any],
    env: dict[str, str],
    named: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    argv = [_variant(model_dirs["qwen3"], edits, tmp_path)]
    by_doctor, report = doctor_refuses(argv)
    by_serve, error = serve_refuses(argv)
    assert (by_doctor, by_serve) == (True, True), (report[-1500:], error[-1500:])
    # The doctor's attention section says what serve's backend selection would refuse.
    (item,) = _attention_items(report)
    assert item["status"].upper() == "FAIL" and named in item["detail"].lower(), item


@pytest.mark.parametrize(
    "argv",
    [["./models/no-such-model"], [TINY, "--quantization", "ascend"]],
    ids=["missing local path", "ascend quantization without a description"],
)
def test_serve_refuses_with_the_doctors_message(
    model_dirs: dict[str, str], argv: list[str]
) -> None:
    argv = _argv(argv, model_dirs["qwen3"])
    _, report = doctor_refuses(argv)
    (failure,) = [
        i for s in json.loads(report)["sections"] for i in s["items"] if i["status"] == "fail"
    ]
    refused, error = serve_refuses(argv)
    # Our StartupError (the message alone), not vLLM's pydantic or Hub traceback.
    assert refused and error.startswith("StartupError: vllm-plugin-ascend: "), error
    assert f"{failure['detail']} Fix: {failure['fix']}" in error


def test_the_doctor_reports_the_execution_serve_configures(model_dirs: dict[str, str]) -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs

    argv = [model_dirs["qwen3"]]
    _, report = doctor_refuses(argv)
    execution = json.loads(report)["data"]["execution"]
    ns = _serve_parser().parse_args(argv)
    ns.model = ns.model_tag or ns.model
    compilation = AsyncEngineArgs.from_cli_args(ns).create_engine_config().compilation_config
    assert execution["graph_mode"] == compilation.cudagraph_mode.name == "NONE"
    assert execution["compile_mode"] == compilation.mode.name == "DYNAMO_TRACE_ONCE"


def test_the_npu_worker_captures_graphs_as_the_doctor_says() -> None:
    """The doctor reports the NPU plan's graphs as run because the worker calls the
    runner's capture_model; were it to stop, NPU_WORKER_CAPTURES_GRAPHS changes too."""
    import inspect

    from adapters.doctor.plan.config import NPU_WORKER_CAPTURES_GRAPHS
    from adapters.vllm.worker.worker import NpuWorker

    source = inspect.getsource(NpuWorker.compile_or_warm_up_model)
    assert ("capture_model" in source) is NPU_WORKER_CAPTURES_GRAPHS


def test_a_missing_directory_is_named_as_missing() -> None:
    _, report = doctor_refuses(["/nonexistent/model-dir"])
    assert "/nonexistent/model-dir does not exist" in report


def test_plan_without_the_separator_says_how_to_call_it(capsys: pytest.CaptureFixture[str]) -> None:
    code = doctor_main(["plan", str(Path("models/tiny-llama"))], root=container())
    assert code == 2
    err = capsys.readouterr().err
    assert "ascend-doctor plan -- models/tiny-llama" in err


def test_max_model_len_beyond_the_config_is_refused_for_that_reason(
    model_dirs: dict[str, str],
) -> None:
    _, report = doctor_refuses([model_dirs["qwen3"], "--max-model-len", "16384"])
    assert "--max-model-len 16384 is greater than the 8192 tokens" in report


# The MoE communication method: the tiny Qwen3-MoE with TP 2 + EP on the host, whose
# expert parallelism is all-gather over gloo; a forced method the host cannot serve is
# refused by both before any weight loads. (id, VLLM_ASCEND_MOE_COMM_METHOD, both refuse?)
MOE_ROWS: list[tuple[str, str, bool]] = [
    ("forced mc2 on the host", "mc2", True),
    ("forced allgather on the host", "allgather", False),
]


@pytest.mark.parametrize(("method", "refused"), [(m, r) for _, m, r in MOE_ROWS],
                         ids=[i for i, _, _ in MOE_ROWS])  # fmt: skip
def test_doctor_and_serve_agree_on_the_moe_comm_method(
    model_dirs: dict[str, str], monkeypatch: pytest.MonkeyPatch, method: str, refused: bool
) -> None:
    monkeypatch.setenv("VLLM_ASCEND_MOE_COMM_METHOD", method)
    argv = [model_dirs["qwen3_moe"], "--tensor-parallel-size", "2", "--enable-expert-parallel"]
    by_doctor, report = doctor_refuses(argv)
    by_serve, error = serve_refuses(argv)
    assert (by_doctor, by_serve) == (refused, refused), (report[-1500:], error[-1500:])
    if refused:
        assert "VLLM_ASCEND_MOE_COMM_METHOD=mc2 cannot serve" in error


# (id, flags after the tiny Qwen-VL model's directory, both refuse?, what the refusal names)
VL_ROWS: list[tuple[str, list[str], bool, str]] = [
    ("images and video", [], True, "uses video inputs"),
    ("images only", ["--limit-mm-per-prompt", '{"video": 0}'], False, ""),
    ("language model only", ["--language-model-only"], False, ""),
    ("no image, no video", ["--limit-mm-per-prompt", '{"image": 0, "video": 0}'], False, ""),
]  # fmt: skip


@pytest.mark.parametrize("style", ["qwen2_5_vl", "qwen3_vl"])
@pytest.mark.parametrize(("flags", "refused", "named"), [(f, r, n) for _, f, r, n in VL_ROWS],
                         ids=[i for i, _, _, _ in VL_ROWS])  # fmt: skip
def test_doctor_and_serve_agree_on_a_vision_language_model(
    style: str, flags: list[str], refused: bool, named: str
) -> None:
    """The tiny Qwen-VL models (their config.json has text_config.architectures: null):
    the towers are refused before any weight loads, naming the model's class, unless the
    flags leave them idle."""
    from support.hf_reference import MODELS_DIR, make_models_module

    model = str(make_models_module().make_vl_model(MODELS_DIR / f"tiny-{style}", style))
    by_doctor, report = doctor_refuses([model, *flags])
    by_serve, error = serve_refuses([model, *flags])
    assert (by_doctor, by_serve) == (refused, refused), (report[-1500:], error[-1500:])
    if refused:
        arch = "Qwen2_5_VL" if style == "qwen2_5_vl" else "Qwen3VL"
        for text in (report, error):
            assert f"{arch}ForConditionalGeneration {named}" in text, text[-1500:]
            assert "unknown" not in text


@pytest.mark.parametrize("variable", [None, "1"], ids=["unset", "V2 asked"])
def test_the_doctor_reports_the_runner_serve_configures(
    model_dirs: dict[str, str], monkeypatch: pytest.MonkeyPatch, variable: str | None
) -> None:
    """On the host both say V1 (V2 asked is overridden with the reason); the NPU's V2
    decision is tests/integration/npu/test_v2_runner_on_emulated_npu.py's."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    if variable is None:
        monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    else:
        monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", variable)
    argv = [model_dirs["qwen3"], "--enforce-eager"]
    _, report = doctor_refuses(argv)
    runner = json.loads(report)["data"]["model_runner"]
    saved = dict(os.environ)
    try:
        ns = _serve_parser().parse_args(argv)
        ns.model = ns.model_tag or ns.model
        config = AsyncEngineArgs.from_cli_args(ns).create_engine_config()
        served_v2 = bool(config.use_v2_model_runner)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert runner["runner"] == ("V2" if served_v2 else "V1") == "V1"
    assert ("no Triton driver" in runner["reason"]) is (variable == "1")


# The NPU rows (emulated NPU, triton-ascend's driver presented as active, as on an NPU
# host): the runner the doctor says and the one vLLM's engine believes (a KV connector
# and hybrid models fall back by the same reading: unit/vllm/test_configure_runner
# and unit/core/test_plan_runner_features). (id,
# VLLM_USE_V2_MODEL_RUNNER, flags after the tiny Qwen3's directory, runner, the reason says)
NPU_RUNNER_ROWS: list[tuple[str, str | None, list[str], str, str]] = [
    ("unset", None, [], "V1", "V2 is opt-in on the NPU"),
    ("V2 asked", "1", [], "V2", "the NPU worker builds it (NpuModelRunnerV2, eager"),
    ("V2 asked, LoRA", "1", ["--enable-lora", "--max-lora-rank", "8"], "V2",
     "the NPU worker builds it (NpuModelRunnerV2, eager"),
    ("V2 asked, TP=2", "1", ["--tensor-parallel-size", "2"], "V2",
     "the NPU worker builds it (NpuModelRunnerV2, eager"),
    ("V2 asked, speculative", "1",
     ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 2,
                                          "prompt_lookup_max": 3})],
     "V1", "speculative decoding ('ngram'): "),
]  # fmt: skip


@pytest.fixture(scope="module")
def npu_runner_rows(model_dirs: dict[str, str]) -> list[dict[str, Any]]:
    """Every NPU row in one child process (configs only: no engine, no weights)."""
    import subprocess
    import sys

    from support.torch_npu_emulator.activate import child_env

    rows = [(variable, [model_dirs["qwen3"], "--enforce-eager", *flags])
            for _, variable, flags, _, _ in NPU_RUNNER_ROWS]  # fmt: skip
    env = child_env(dict(os.environ, OMP_NUM_THREADS="1"), device_count=2, triton_driver=True)
    env["VLLM_ASCEND_TRITON_KERNELS"] = "off"  # the emulated triton-ascend has no compiler
    script = Path(__file__).with_name("doctor_serve_npu_run.py")
    proc = subprocess.run([sys.executable, str(script), json.dumps(rows)],
                          capture_output=True, text=True, env=env, timeout=900)  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (proc.stdout + proc.stderr)[-6000:]
    results: list[dict[str, Any]] = json.loads(lines[-1].removeprefix("RESULT "))
    return results


@pytest.mark.parametrize("row", range(len(NPU_RUNNER_ROWS)), ids=[r[0] for r in NPU_RUNNER_ROWS])
def test_the_doctor_and_serve_say_the_same_runner_on_the_npu(npu_runner_rows, row: int) -> None:
    """The plan's one runner decision, read by the doctor and believed by vLLM's engine
    (whose V1/V2 the worker builds): V2 where asked and served, V1 with the reason where
    the NPU's V2 runner does not serve a feature of the deployment."""
    _, _, _, runner, says = NPU_RUNNER_ROWS[row]
    result = npu_runner_rows[row]
    assert result["device"] == "npu" and result["doctor_code"] != 2, result
    doctor = result["doctor"]
    assert doctor["runner"] == ("V2" if result["serve_v2"] else "V1") == runner, result
    assert says in doctor["reason"], doctor["reason"]
