"""LLM.generate on the emulated NPU with NPU graphs (no enforce_eager) gives the eager ids.

Each run is one engine in a fresh process (generate_run.py with GENERATE_GRAPH_MODE):
vLLM compiles the model piecewise (the NPU platform's "eager" compile backend) and
captures graphs for sizes 1, 2, 4 and 8 through the platform's static graph wrapper
(adapters.vllm.npu_model_runner.NpuGraphWrapper on the runtime port's NPUGraph). The
emulated device records what a capture launches and refuses what a real capture refuses
(a device-to-host read, a sync); replays run the record again over the same memory.

Prompts of five different lengths finish prefill at different steps and then decode
together, so the decode batch runs at 5, 4, ... sizes padded to the captured 8 and 4 and
run exactly at 2 and 1: their greedy ids must equal the eager NPU run's and the host's.
bf16, block 128, chunked prefill (a 77-token prompt, 64 tokens a step). An emulator,
not Ascend hardware.
"""

from __future__ import annotations

from typing import Any

import pytest

from integration.npu.test_generate_on_emulated_npu import _result, _start

LENGTHS = "5,40,1,77,20"
STYLES = ("llama",)


def _start_graph(device: str, model: str, mode: str | None) -> Any:
    import os

    saved = {k: os.environ.get(k) for k in ("GENERATE_GRAPH_MODE", "GENERATE_LENGTHS")}
    os.environ["GENERATE_LENGTHS"] = LENGTHS
    if mode:
        os.environ["GENERATE_GRAPH_MODE"] = mode
    else:
        os.environ.pop("GENERATE_GRAPH_MODE", None)
    try:
        return _start(device, model)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def graph_runs(npu_model_dirs: dict[str, str]) -> dict[tuple[str, str, str], dict[str, Any]]:
    keys = [
        (device, style, mode)
        for style in STYLES
        for device, mode in (("host", "eager"), ("npu", "eager"), ("npu", "PIECEWISE"))
    ]
    procs = {
        key: _start_graph(key[0], npu_model_dirs[key[1]], None if key[2] == "eager" else key[2])
        for key in keys
    }
    return {key: _result(proc) for key, proc in procs.items()}


@pytest.mark.parametrize("style", STYLES)
def test_piecewise_graphs_are_captured_and_give_the_eager_ids(graph_runs, style: str) -> None:
    host = graph_runs["host", style, "eager"]
    eager = graph_runs["npu", style, "eager"]
    graphs = graph_runs["npu", style, "PIECEWISE"]
    assert graphs["graph_mode"] == "PIECEWISE"  # what the operator asked is what runs
    assert graphs["capture_sizes"] == [1, 2, 4, 8]
    # One graph per piece (between attention layers) and captured size.
    assert graphs["captured"] >= 4 * 2
    assert eager["captured"] == 0 and eager["counters"]["graph_replays"] == 0
    # The run replayed graphs; the eager one captured none.
    assert graphs["counters"]["graph_replays"] > 0
    assert graphs["counters"]["graph_replayed_ops"] > 0
    assert graphs["runs"] == eager["runs"] == host["runs"]
