"""LLM.generate on the emulated NPU with NPU graphs (no enforce_eager) gives the eager ids.

Each run is one engine in a fresh process (generate_run.py with GENERATE_GRAPH_MODE):
vLLM compiles the model piecewise (the NPU platform's "eager" compile backend) and
captures graphs for sizes 1, 2, 4 and 8 through the platform's static graph wrapper
(adapters.vllm.npu_model_runner.NpuGraphWrapper on the runtime port's NPUGraph). The
emulated device records what a capture launches and refuses what a real capture refuses
(a device-to-host read, a sync); replays run the record again over the same memory.

Prompts of five different lengths (1 to 150 tokens) finish prefill at different steps and
decode together in batches of 3 to 5 requests, padded to the captured 4 and 8: their
greedy ids must equal the eager NPU run's and the host's, in both passes (the second
finds the 150-token prompt's first block in the prefix cache).
bf16, block 128, chunked prefill (the 150-token prompt, 64 tokens a step). An emulator,
not Ascend hardware.
"""

from __future__ import annotations

from typing import Any

import pytest

from integration.npu.test_generate_on_emulated_npu import _result, _start

LENGTHS = "5,40,1,150,20"
# style -> the graph mode the operator asks for. Qwen3 asks FULL_DECODE_ONLY, which the
# NPU's attention cannot capture yet: the plan serves it as PIECEWISE, logged with its
# reason (ascend_core/plan/graph.py), never silently as NONE.
ASKED = {"llama": "PIECEWISE", "qwen3": "FULL_DECODE_ONLY"}
HOST_TOO = ("llama",)  # the host's ids once; the eager NPU run equals them for every style


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
    keys = [(device, style, "eager") for style in HOST_TOO for device in ("host",)]
    keys += [("npu", style, "eager") for style in ASKED]
    keys += [("npu", style, mode) for style, mode in ASKED.items()]
    done: dict[tuple[str, str, str], dict[str, Any]] = {}
    for at in range(0, len(keys), 3):  # a few engines at a time: a small machine
        procs = {
            key: _start_graph(
                key[0], npu_model_dirs[key[1]], None if key[2] == "eager" else key[2]
            )
            for key in keys[at : at + 3]
        }
        done.update({key: _result(proc) for key, proc in procs.items()})
    return done


@pytest.mark.parametrize("style", list(ASKED))
def test_npu_graphs_are_captured_and_give_the_eager_ids(graph_runs, style: str) -> None:
    eager = graph_runs["npu", style, "eager"]
    graphs = graph_runs["npu", style, ASKED[style]]
    # What runs is PIECEWISE (FULL_DECODE_ONLY served as PIECEWISE, with its reason).
    assert graphs["graph_mode"] == "PIECEWISE"
    assert graphs["capture_sizes"] == [1, 2, 4, 8]
    # One graph per piece (2 layers: 3 pieces between and around attention) and size.
    assert graphs["captured"] == 3 * 4
    assert eager["captured"] == 0 and eager["counters"]["graph_replays"] == 0
    # Each decode step after the first prefill replays its pieces; nothing is captured
    # while serving (a capture refused or made late would show here).
    counters = graphs["counters"]
    assert counters["graph_replays"] > 0 and counters["graph_replays"] % 3 == 0
    assert counters["graph_captures"] == 0 and counters["graph_replayed_ops"] > 0
    # Fewer ops launched from the host than eager, the same reads back.
    assert counters["fallback_ops"] < eager["counters"]["fallback_ops"]
    assert counters["d2h_copies"] == eager["counters"]["d2h_copies"]
    assert counters["scalar_reads"] == 0
    assert graphs["runs"] == eager["runs"] and len(graphs["runs"]) == 2
    assert graphs["cached_tokens"] == [0, 0, 0, 128, 0] == eager["cached_tokens"]
    if style in HOST_TOO:
        assert eager["runs"] == graph_runs["host", style, "eager"]["runs"]


def test_the_doctor_reports_the_graph_mode_the_engine_runs(graph_runs, npu_model_dirs) -> None:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from support.torch_npu_emulator.activate import child_env

    env = child_env({k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_")})
    env["VLLM_ASCEND_DEVICE"] = "npu"
    doctor = Path(sys.executable).with_name("ascend-doctor")
    args = ["--dtype", "bfloat16", "--block-size", "128",
            f"-cc.cudagraph_mode={ASKED['qwen3']}", "-cc.cudagraph_capture_sizes=[1,2,4,8]"]
    done = subprocess.run([str(doctor), "plan", "--json", "--", npu_model_dirs["qwen3"], *args],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.stdout.lstrip().startswith("{"), done.stderr[-2000:]
    data = json.loads(done.stdout)["data"]
    plan = data["plan"]
    engine = graph_runs["npu", "qwen3", ASKED["qwen3"]]
    assert f"npu_graph_mode={engine['graph_mode']}," in plan, plan
    assert data["execution"]["graph_mode"] == engine["graph_mode"]  # what runs, not asked
    assert data["graphs"]["mode"] == engine["graph_mode"]
    assert data["graphs"]["capture_sizes"] == engine["capture_sizes"]
    assert f"cudagraph_mode: {ASKED['qwen3']} -> {engine['graph_mode']}" in plan
