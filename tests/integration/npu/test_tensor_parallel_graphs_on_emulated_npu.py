"""TP=2 on two emulated NPUs with NPU graphs (no enforce_eager) gives the TP=1 ids.

Each rank runs NpuWorker/NpuModelRunner on its own emulated device (npu:0, npu:1) and
captures graphs for sizes 1, 2, 4 and 8 through the platform's graph wrapper. vLLM's
per-group capture context would refuse the NPU's device communicator (it asserts CUDA's
or XPU's); the declared patch npu-graph-capture-communicator lets it in, and the platform
opts in to vLLM's custom-op collectives, so each all-reduce is one opaque op in the
compiled pieces and graphs. The all-reduces run inside the graphs: the emulated device
group is gloo (no HCCL without CANN), each collective staged through host memory, and the
emulator's stand-in for HCCL (support.torch_npu_emulator.collective) records it in the
capture as HCCL's are recorded on a device, so each replay on each rank runs it again
over the captured buffers.

Block 128, chunked prefill, a prefix-cache pass; prompts of five lengths (1 to 150
tokens) finish prefill at different steps, so the decode batch shrinks through the
captured 4 and 8 with padding. Two comparisons, one engine each (fresh processes, side by
side):
- FULL_AND_PIECEWISE (the dense default) in float16 against TP=1 (eager, float16);
- FULL_DECODE_ONLY in bfloat16 against TP=2 eager in bfloat16. Against TP=1 in bfloat16
  one of the five prompts takes another near-tied token at its second step, in the eager
  TP=2 run as in the graphs (each rank rounds its partial sums to bf16 before the
  all-reduce; seen here), hence float16 for the TP=1 comparison, as in
  test_tensor_parallel_on_emulated_npu.py.
A fifth engine serves TP=2 on vLLM's V2 model runner (VLLM_USE_V2_MODEL_RUNNER=1, the
plan's graphs: FULL_AND_PIECEWISE, float16): each rank's NpuModelRunnerV2 captures V2's
FULL decode graphs through V2's graph manager on the NPU's graphs (npu_graphs_v2.py, the
all-reduces and the logits' gather recorded in them) and the pieces on the platform's
wrapper; V2's Triton kernels run in Triton's interpreter (TRITON_INTERPRET=1, as in
test_v2_runner_on_emulated_npu.py). Its greedy ids are TP=1's and V1's TP=2 graphs'.
An emulator, not Ascend hardware.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from integration.npu.test_generate_on_emulated_npu import RUNNER, _result
from integration.npu.test_graphs_on_emulated_npu import CAPTURE_SIZES, LENGTHS, PIECES
from support.child_runs import read_all
from support.doctor_plans import doctor_plans as plans
from support.torch_npu_emulator.activate import child_env

MODES = ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY")
CAPTURED = {"FULL_AND_PIECEWISE": (PIECES + 1) * len(CAPTURE_SIZES), "FULL_DECODE_ONLY": 4}
# Each graph run (TP=2, mode, dtype) and the run whose ids it must give.
GRAPH_RUNS = {
    "FULL_AND_PIECEWISE": ((2, "FULL_AND_PIECEWISE", "float16"), (1, "eager", "float16")),
    "FULL_DECODE_ONLY": ((2, "FULL_DECODE_ONLY", "bfloat16"), (2, "eager", "bfloat16")),
}
# The TP=2 run on vLLM's V2 runner, the plan's graphs ("DEFAULT": no cudagraph_mode given).
V2_RUN = (2, "V2", "float16")
V2_SERVED = "FULL_AND_PIECEWISE"  # the plan's choice for a dense model


def _start(model: str, tp: int, mode: str | None, dtype: str) -> subprocess.Popen[str]:
    v2 = mode == "V2"
    env = child_env(dict(os.environ), device_count=2, triton_driver=v2)
    for key in ("VLLM_ASCEND_DEVICE", "GENERATE_GRAPH_MODE", "GENERATE_STALE_GRAPH_ARGUMENTS",
                "VLLM_USE_V2_MODEL_RUNNER"):  # fmt: skip
        env.pop(key, None)
    env["GENERATE_LENGTHS"] = LENGTHS
    if mode:
        env["GENERATE_GRAPH_MODE"] = "DEFAULT" if v2 else mode
    if v2:  # V2's Triton kernels interpreted; the plugin's own kernels on their torch path
        env.update(VLLM_USE_V2_MODEL_RUNNER="1", TRITON_INTERPRET="1")
        env["VLLM_ASCEND_TRITON_KERNELS"] = "off"
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.Popen(
        [sys.executable, str(RUNNER), "npu", model, str(tp), dtype],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


@pytest.fixture(scope="module")
def runs(npu_model_dirs: dict[str, str]) -> dict[tuple[int, str, str], dict[str, Any]]:
    """(tp, mode, dtype): every graph run and its reference, started together."""
    llama = npu_model_dirs["llama"]
    keys = [key for pair in GRAPH_RUNS.values() for key in pair] + [V2_RUN]
    procs = {
        (tp, mode, dtype): _start(llama, tp, None if mode == "eager" else mode, dtype)
        for tp, mode, dtype in keys
    }
    return read_all(procs, _result)


@pytest.mark.parametrize("mode", MODES)
def test_tp2_with_npu_graphs_captures_on_both_ranks_and_gives_the_eager_ids(runs, mode) -> None:
    graphs, reference = GRAPH_RUNS[mode]
    two, one = runs[graphs], runs[reference]
    assert one["captured"] == 0 and one["graph_mode"] == "NONE"
    assert two["graph_mode"] == mode and two["capture_sizes"] == CAPTURE_SIZES
    # Every graph at every size, on both ranks: no capture refused.
    assert two["rank_captured"] == [CAPTURED[mode]] * 2
    for counters in two["rank_counters"]:
        # Decode steps replay what was captured (the all-reduces inside); nothing is
        # captured while serving; no scalar read.
        assert counters["graph_replays"] > 0 and counters["graph_replayed_ops"] > 0
        assert counters["graph_captures"] == 0 and counters["scalar_reads"] == 0
    assert two["rank_counters"][0]["graph_replays"] == two["rank_counters"][1]["graph_replays"]
    assert two["runs"] == one["runs"] and len(two["runs"]) == 2
    assert two["cached_tokens"] == [0, 0, 0, 128, 0] == one["cached_tokens"]


def test_tp2_on_the_v2_runner_captures_on_both_ranks_and_gives_the_tp1_ids(runs) -> None:
    two, one = runs[V2_RUN], runs[(1, "eager", "float16")]
    assert two["engine_v2"] is True and one["engine_v2"] is False
    assert two["graph_mode"] == V2_SERVED and two["capture_sizes"] == CAPTURE_SIZES
    assert two["rank_captured"] == [CAPTURED[V2_SERVED]] * 2
    for runner, counters in zip(two["rank_runners"], two["rank_counters"], strict=True):
        # Each rank's runner derives from vLLM's V2 runner, not V1's.
        assert runner["runner"] == "NpuModelRunnerV2"
        assert "vllm.v1.worker.gpu.model_runner.GPUModelRunner" in runner["mro"]
        assert "vllm.v1.worker.gpu_model_runner.GPUModelRunner" not in runner["mro"]
        # Decode steps replayed V2's FULL graphs (the all-reduces inside) and sampled from
        # the logits each recorded, by its greedy tail; nothing captured while serving.
        assert counters["graph_replays"] > 0 and counters["graph_replayed_ops"] > 0
        assert counters["graph_captures"] == 0 and counters["scalar_reads"] == 0
        assert runner["graph_logits_steps"] > 0 and runner["tail_steps"] > 0
    assert two["rank_counters"][0]["graph_replays"] == two["rank_counters"][1]["graph_replays"]
    assert two["runs"] == one["runs"] == runs[GRAPH_RUNS["FULL_AND_PIECEWISE"][0]]["runs"]
    assert two["cached_tokens"] == [0, 0, 0, 128, 0] == one["cached_tokens"]


@pytest.fixture(scope="module")
def doctor_plans(npu_model_dirs: dict[str, str]) -> dict[str, dict[str, Any]]:
    """`ascend-doctor plan --json` of each mode at TP=2 on two emulated NPUs, both in one
    child process (support.doctor_plans)."""
    env = child_env(
        {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_")},
        device_count=2,
    )
    env["VLLM_ASCEND_DEVICE"] = "npu"
    args = [
        "--dtype", "bfloat16", "--block-size", "128", "--tensor-parallel-size", "2",
        "-cc.cudagraph_capture_sizes=[1,2,4,8]",
    ]
    argvs = [[npu_model_dirs["llama"], *args, f"-cc.cudagraph_mode={mode}"] for mode in MODES]
    return dict(zip(MODES, plans(argvs, env), strict=True))


@pytest.mark.parametrize("mode", MODES)
def test_the_doctor_reports_the_tp2_graph_mode_and_sizes_the_engine_runs(
    runs, doctor_plans, mode
) -> None:
    data = doctor_plans[mode]["data"]
    engine = runs[GRAPH_RUNS[mode][0]]
    assert f"npu_graph_mode={engine['graph_mode']}," in data["plan"], data["plan"]
    assert data["execution"]["graph_mode"] == engine["graph_mode"] == mode
    assert data["graphs"]["mode"] == engine["graph_mode"]
    assert data["graphs"]["capture_sizes"] == engine["capture_sizes"]
    assert "npu-graph-capture-communicator" in doctor_plans[mode]["stdout"]
