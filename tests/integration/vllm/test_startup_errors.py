"""The plugin's errors at startup reach the operator as their message alone (with the fix),
and the process exits non-zero; in-process `LLM(...)` users get a StartupError carrying
the typed error."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.vllm.engine.startup_errors import StartupError
from ascend_core.errors import PlanErrors
from ascend_core.memory_budget import KvCacheTooSmallError

_VENV_BIN = Path(sys.executable).parent
BAD_CONFIG = '{"ascend_compilation_config": {"enable_npugraph_ex": "yes"}}'
# A frame of our code in a traceback: the adapter or the core.
_OUR_FRAME = re.compile(r'File ".*/(adapters|ascend_core|ports)/')


def _serve(model: str, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VLLM_ASCEND_DEVICE": "cpu"}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # as an operator runs it
    return subprocess.run(
        [str(_VENV_BIN / "vllm"), "serve", model, "--port", "0", "--enforce-eager", *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_a_bad_additional_config_stops_serve_with_the_message_alone(
    model_dirs: dict[str, str],
) -> None:
    result = _serve(model_dirs["llama"], "--additional-config", BAD_CONFIG)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-2:]
    assert last == [
        "vllm-plugin-ascend: 1 problem(s) in the configuration:",
        "- additional_config.ascend_compilation_config.enable_npugraph_ex must be true or "
        "false, got 'yes'. Fix: write true or false",
    ]


def test_a_kv_budget_error_in_the_engine_is_its_message_with_no_frame_of_ours(
    model_dirs: dict[str, str],
) -> None:
    flags = ("--max-model-len", "512", "--kv-cache-memory-bytes", "8192")
    result = _serve(model_dirs["llama"], *flags)
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    ours = [i for i, line in enumerate(lines) if line.startswith("vllm-plugin-ascend: KV cache")]
    assert len(ours) == 1, result.stderr[-3000:]
    assert "Fix: --kv-cache-memory-bytes 262144" in lines[ours[0]]
    # vLLM's front end then reports the engine's exit in its own words ("See root cause
    # above"): that traceback is vLLM's, and none of its frames is ours.
    assert not _OUR_FRAME.search(result.stderr), result.stderr[-3000:]
    # After it, the front end repeats the engine's reason as the last line.
    last = lines[-1]
    assert last.startswith("vllm-plugin-ascend: the engine process stopped at startup: KV")
    assert "Fix: --kv-cache-memory-bytes 262144" in last


def test_in_process_llm_gets_a_startup_error_with_the_typed_error(
    model_dirs: dict[str, str],
) -> None:
    from vllm import LLM

    with pytest.raises(StartupError) as err:
        LLM(model=model_dirs["llama"], enforce_eager=True, additional_config={"enable_kv_nz": "x"})
    assert not isinstance(err.value, Exception)  # `except Exception` lets it through
    assert isinstance(err.value.error, PlanErrors)
    assert err.value.__cause__ is err.value.error
    assert err.value.code == f"vllm-plugin-ascend: {err.value.error}"


def test_in_process_kv_budget_error_is_a_startup_error(model_dirs: dict[str, str]) -> None:
    from vllm import LLM

    with pytest.raises(StartupError) as err:
        LLM(
            model=model_dirs["llama"],
            dtype="float32",
            enforce_eager=True,
            max_model_len=512,
            kv_cache_memory_bytes=8192,
        )
    assert isinstance(err.value.error, KvCacheTooSmallError)
    assert "max_model_len=512" in str(err.value.code)


def test_a_missing_local_model_path_stops_serve_at_once_with_the_message_alone() -> None:
    result = _serve("./models/no-such-model")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("vllm-plugin-ascend: ./models/no-such-model does not exist")
    assert "hf download" in last


def test_vllm_calls_our_hook_before_it_reads_the_model() -> None:
    """startup.refuse_before_start runs in Platform.pre_register_and_update(), which vLLM
    calls (without arguments) first thing in EngineArgs.create_engine_config."""
    import inspect

    from vllm.engine.arg_utils import EngineArgs

    source = inspect.getsource(EngineArgs.create_engine_config)
    hook = source.index("current_platform.pre_register_and_update()")
    assert hook < source.index("maybe_override_with_speculators(")
    assert hook < source.index("self.create_model_config()")
