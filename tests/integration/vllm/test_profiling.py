"""vLLM's profiler hooks on the host device: LLM.start_profile / stop_profile around a
generate write torch's chrome trace under --profiler-config's directory, through the
plugin's worker and its DeviceProfiler (adapters.cpu.profiler.HostProfiler); the trace
names the aten ops, the host's native kernels and vLLM's step annotations.

One in-process engine (eager, fp32, the tiny Llama) serves every case.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from engine_teardown import shut_down

from support.native_kernels import has_compiler


@pytest.fixture(scope="module")
def run(model_dirs, tmp_path_factory) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    from vllm import LLM, SamplingParams, TokensPrompt

    trace_dir = tmp_path_factory.mktemp("traces")
    llm = LLM(
        model=model_dirs["llama"],
        dtype="float32",
        enforce_eager=True,
        max_model_len=256,
        max_num_batched_tokens=64,
        max_num_seqs=4,
        kv_cache_memory_bytes=16 << 20,
        seed=0,
        profiler_config={
            "profiler": "torch",
            "torch_profiler_dir": str(trace_dir),
            "torch_profiler_use_gzip": False,
            "torch_profiler_with_stack": False,
            "ignore_frontend": True,
        },
    )
    try:
        params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
        prompts = [TokensPrompt(prompt_token_ids=[5, 6, 7, 8, 9])]
        before = llm.generate(prompts, params, use_tqdm=False)
        llm.start_profile(profile_prefix="gen")
        profiled = llm.generate(prompts, params, use_tqdm=False)
        llm.stop_profile()
        worker = llm.llm_engine.model_executor.driver_worker.worker
        return {
            "dir": trace_dir,
            "profiler": type(worker.profiler).__name__,
            "device_profiler": type(worker.profiler._device).__name__,
            "last_trace": worker.profiler.last_trace,
            "ids": [list(o.outputs[0].token_ids) for o in (*before, *profiled)],
        }
    finally:
        shut_down(llm)


def test_the_trace_is_written_where_the_config_asked(run) -> None:  # type: ignore[no-untyped-def]
    assert (run["profiler"], run["device_profiler"]) == ("PortProfiler", "HostProfiler")
    traces = sorted(Path(run["dir"]).glob("*.pt.trace.json"))
    assert [str(t) for t in traces] == [run["last_trace"]]
    assert traces[0].name.startswith("gen_")  # the start's profile_prefix, then the rank


def test_the_trace_names_aten_ops_and_the_engine_steps(run) -> None:  # type: ignore[no-untyped-def]
    (trace,) = Path(run["dir"]).glob("*.pt.trace.json")
    names = {e.get("name", "") for e in json.loads(trace.read_text())["traceEvents"]}
    assert {"aten::embedding", "aten::rms_norm", "aten::silu"} <= names
    assert "vllm::unified_attention_with_output" in names  # the plugin's backend behind it
    if has_compiler():  # the host's native kernels, by their torch op names
        assert {"ascend_host_native::decode_attention", "ascend_host_native::packed_linear"} <= (
            names
        )
    # vLLM's annotation of each engine step (a prefill of 5 tokens, then decodes).
    assert "execute_context_1(5)_generation_0(0)" in names
    assert any(n.startswith("execute_context_0(0)_generation_1(1)") for n in names)


def test_profiling_does_not_change_the_ids(run) -> None:  # type: ignore[no-untyped-def]
    before, profiled = run["ids"]
    assert before == profiled
