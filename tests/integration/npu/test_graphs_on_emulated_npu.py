"""LLM.generate on the emulated NPU with NPU graphs (no enforce_eager) gives the eager ids.

Each NPU run is one engine in a fresh process (generate_run.py with GENERATE_GRAPH_MODE;
the host's eager runs share one), started once for the module: vLLM compiles the model
piecewise (the NPU platform's "eager" compile backend) and captures graphs for sizes 1, 2,
4 and 8 through the
platform's static graph wrapper (adapters.vllm.worker.npu_model_runner.NpuGraphWrapper on the
runtime port's NPUGraph). The emulated device records what a capture launches and refuses
what a real capture refuses (a device-to-host read, a sync); replays run the record again
over the same memory, torch_npu ops with the host-side lists they were captured with
unless NPUGraph.update gave them new ones.

- PIECEWISE: the pieces between the attention layers; attention runs eagerly.
- FULL_DECODE_ONLY: each uniform decode step is one graph, attention inside: its plan in
  the builder's persistent buffers, the fused attention op's lengths updated after each
  replay is launched. Other steps run compiled, without graphs.
- FULL_AND_PIECEWISE (the plan's default for a dense model): decode steps whole, the
  other steps in pieces.

Prompts of five different lengths (1 to 150 tokens) finish prefill at different steps and
decode together in batches of 3 to 5 requests, padded to the captured 4 and 8 (the
padding request attends to nothing, its token writes to vLLM's null block): their greedy
ids must equal the eager NPU run's and the host's, in both passes (the second finds the
150-token prompt's first block in the prefix cache). bf16, block 128, chunked prefill
(the 150-token prompt, 64 tokens a step). A run whose graphs forget the parameter update
(unit.fakes.graphs) gives other ids. An emulator, not Ascend hardware.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from integration.npu.test_generate_on_emulated_npu import _result, _results, _start

LENGTHS = "5,40,1,150,20"
DEFAULT = "DEFAULT"  # no cudagraph_mode given: the plan's choice
STALE = "FULL_DECODE_ONLY, update skipped"
# (style, what the operator asks) -> the graph mode the engine runs.
GRAPH_RUNS: dict[tuple[str, str], str] = {
    ("llama", "PIECEWISE"): "PIECEWISE",
    ("llama", "FULL_DECODE_ONLY"): "FULL_DECODE_ONLY",
    ("llama", "FULL_AND_PIECEWISE"): "FULL_AND_PIECEWISE",
    ("qwen3", DEFAULT): "FULL_AND_PIECEWISE",  # vllm-ascend's default for a dense model
}
RUN_IDS = [f"{style}-{asked}" for style, asked in GRAPH_RUNS]
STYLES = ("llama", "qwen3")
# The NPU's eager run, the graphs' counters' baseline: Llama's (Qwen3's graphs, the plan's
# default, are held to the host's ids; its eager NPU ids are test_generate_on_emulated_npu's).
EAGER_STYLES = ("llama",)
CAPTURE_SIZES = [1, 2, 4, 8]
# Graphs per size: 2 layers make 3 pieces (between and around attention); a full graph
# is one.
PIECES = 3
CAPTURED = {
    "PIECEWISE": PIECES * len(CAPTURE_SIZES),
    "FULL_DECODE_ONLY": len(CAPTURE_SIZES),
    "FULL_AND_PIECEWISE": (PIECES + 1) * len(CAPTURE_SIZES),
}
# Ops a FULL decode step of batch 8 launches outside its one replay (docs/benchmarks.md
# lists each): vLLM's fill of the block table's padding rows (on an empty slice at a
# captured size; the rows are written on the host too). The step's positions, lengths,
# offsets, discard mask, block table, slots (their padding the null block's) and the
# attention plan's indices are slices of one staging arena, sent in one copy
# (adapters/vllm/worker/host_decode_inputs.py, staging_arena.py); the logits matmul and a
# greedy batch's argmax are recorded in the graph after the model
# (NpuGraphWrapper.sample_tail), none of the model's ops are launched. (Eager: every op
# of the model too.) Device-to-device copies, a launch each too: the last sampled ids.
OUTSIDE_FULL_REPLAY = 1
H2D_OUTSIDE_FULL_REPLAY = 1
D2D_OUTSIDE_FULL_REPLAY = 1


def _start_graph(device: str, model: str, mode: str | None, stale: bool = False) -> Any:
    saved = {
        k: os.environ.get(k)
        for k in (
            "GENERATE_GRAPH_MODE",
            "GENERATE_LENGTHS",
            "GENERATE_STALE_GRAPH_ARGUMENTS",
            "GENERATE_CHECK_HOST_DECODE",
        )
    }
    os.environ["GENERATE_LENGTHS"] = LENGTHS
    os.environ["GENERATE_CHECK_HOST_DECODE"] = "1"
    os.environ.pop("GENERATE_STALE_GRAPH_ARGUMENTS", None)
    if stale:
        os.environ["GENERATE_STALE_GRAPH_ARGUMENTS"] = "1"
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


def run_engines(
    dirs: dict[str, str], host_styles: tuple[str, ...], npu_keys: list[tuple[str, str, str]]
) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(device, style, asked mode) -> its run: the host's eager runs of `host_styles` one
    after the other in one process (one start of Python, torch and vLLM for them all),
    beside it the NPU's `npu_keys`, two at a time (a small machine), each read in a
    thread (no run waits on a full pipe)."""
    host = _start_graph("host", os.pathsep.join(dirs[style] for style in host_styles), None)
    done: dict[tuple[str, str, str], dict[str, Any]] = {}
    with ThreadPoolExecutor(3) as reader:
        host_results = reader.submit(_results, host)
        for at in range(0, len(npu_keys), 2):
            read = {}
            for key in npu_keys[at : at + 2]:
                _, style, asked = key
                mode = {"eager": None, DEFAULT: "DEFAULT", STALE: "FULL_DECODE_ONLY"}.get(
                    asked, asked)  # fmt: skip
                proc = _start_graph("npu", dirs[style], mode, stale=asked == STALE)
                read[key] = reader.submit(_result, proc)
            done.update({key: future.result() for key, future in read.items()})
        results = host_results.result()
    assert len(results) == len(host_styles), len(results)
    done.update({("host", s, "eager"): r for s, r in zip(host_styles, results, strict=True)})
    for key, result in done.items():  # the per decode step costs, shown with -s
        step = {k: v for k, v in result.get("decode_step", {}).items() if not k.startswith("op:")}
        print("decode step of 8,", *key, step)
    return done


@pytest.fixture(scope="module")
def graph_runs(npu_model_dirs: dict[str, str]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Every engine of this module, started once: (device, style, asked mode)."""
    keys = [("npu", style, "eager") for style in EAGER_STYLES]
    keys += [("npu", style, asked) for style, asked in GRAPH_RUNS]
    keys += [("npu", "llama", STALE)]
    return run_engines(npu_model_dirs, STYLES, keys)


@pytest.mark.parametrize(("style", "asked"), list(GRAPH_RUNS), ids=RUN_IDS)
def test_npu_graphs_are_captured_and_give_the_eager_and_the_host_ids(
    graph_runs, style: str, asked: str
) -> None:
    eager = graph_runs["npu", "llama", "eager"]  # the counters' baseline (same shapes)
    graphs = graph_runs["npu", style, asked]
    mode = GRAPH_RUNS[style, asked]
    assert graphs["graph_mode"] == mode
    assert graphs["capture_sizes"] == CAPTURE_SIZES
    assert graphs["captured"] == CAPTURED[mode]
    assert eager["captured"] == 0 and eager["counters"]["graph_replays"] == 0
    # Decode steps replay what was captured; nothing is captured while serving (a capture
    # refused or made late would show here).
    counters = graphs["counters"]
    assert counters["graph_replays"] > 0 and counters["graph_replayed_ops"] > 0
    assert counters["graph_captures"] == 0
    if mode == "PIECEWISE":
        assert counters["graph_replays"] % PIECES == 0
    # Fewer ops launched from the host than eager, the same reads back.
    assert counters["fallback_ops"] < eager["counters"]["fallback_ops"]
    assert counters["d2h_copies"] == eager["counters"]["d2h_copies"]
    assert counters["scalar_reads"] == 0
    assert len(graphs["runs"]) == 2
    assert graphs["runs"] == graph_runs["host", style, "eager"]["runs"]
    if style in EAGER_STYLES:
        assert graphs["runs"] == graph_runs["npu", style, "eager"]["runs"]
    assert graphs["cached_tokens"] == [0, 0, 0, 128, 0] == eager["cached_tokens"]


@pytest.mark.parametrize("asked", ["FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"])
def test_a_full_decode_step_is_one_replay_and_a_handful_of_launches(graph_runs, asked) -> None:
    """Per decode step of a batch of 8 (captured size 8): one graph replay, the model's
    ops all inside it, one launch and one copy of the staged inputs outside it, the
    sampled ids the one read back."""
    step = graph_runs["npu", "llama", asked]["decode_step"]
    eager = graph_runs["npu", "llama", "eager"]["decode_step"]
    piecewise = graph_runs["npu", "llama", "PIECEWISE"]["decode_step"]
    assert step["graph_replays"] == 1
    assert step["fallback_ops"] <= OUTSIDE_FULL_REPLAY, step
    assert step["d2d_copies"] <= D2D_OUTSIDE_FULL_REPLAY, step
    assert step["h2d_copies"] <= H2D_OUTSIDE_FULL_REPLAY, step
    assert step["fallback_ops"] < piecewise["fallback_ops"] < eager["fallback_ops"]
    assert piecewise["graph_replays"] == PIECES
    for costs in (step, piecewise, eager):
        assert (costs["d2h_copies"], costs["scalar_reads"], costs["dynamic_shape_ops"]) == (
            1,
            0,
            0,
        )
    # The attention op runs inside the replay: launched from the host in no decode step.
    assert not any(k.startswith("op:") and "fused_infer_attention" in k for k in step)
    assert any(k.startswith("op:") and "fused_infer_attention" in k for k in piecewise)
    # Nor the logits matmul and the greedy argmax (the piecewise step launches both).
    assert_sampling_tail_replayed(step, piecewise)


def assert_sampling_tail_replayed(step: dict[str, float], outside: dict[str, float]) -> None:
    """A FULL decode step launches neither the logits matmul nor a greedy batch's argmax
    (recorded in its graph), where `outside` (a step without the tail) launches both."""
    for op in ("aten::mm", "aten::argmax"):
        assert not any(k.startswith("op:") and op in k for k in step), (op, step)
        assert any(k.startswith("op:") and op in k for k in outside), (op, outside)


# The sampler's ops of a seeded top-k/top-p batch: an eager step launches each, a FULL
# decode step none (its graph's sampled tail, adapters/vllm/worker/sampled_tail.py).
SAMPLER_OPS = ("aten::mm", "aten::sort", "aten::_softmax", "aten::div", "aten::log")


def assert_seeded_sampling_is_eagers(graphs: dict[str, Any], eager: dict[str, Any]) -> None:
    """Seeded top-k/top-p: the FULL graphs' ids are the eager run's, both passes the same
    (a seeded row's noise is keyed by its seed and position, eager or replayed); a seeded
    decode step of 8 is one replay with the logits matmul and the whole sampler inside
    it, at most one launch and one copy of the staged inputs outside, the ids the one
    read back."""
    assert graphs["seeded_runs"][0] == graphs["seeded_runs"][1] == eager["seeded_runs"][0]
    assert eager["seeded_runs"][0] == eager["seeded_runs"][1]
    step = graphs["decode_step_seeded"]
    assert step["graph_replays"] == 1 and step["d2h_copies"] == 1, step
    assert step["fallback_ops"] <= OUTSIDE_FULL_REPLAY, step
    assert step["h2d_copies"] <= H2D_OUTSIDE_FULL_REPLAY, step
    eager_step = eager["decode_step_seeded"]
    for op in SAMPLER_OPS:
        assert not any(k.startswith("op:") and op in k for k in step), (op, step)
        assert any(k.startswith("op:") and op in k for k in eager_step), (op, eager_step)


@pytest.mark.parametrize("asked", ["FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"])
def test_seeded_sampling_in_full_graphs_gives_the_eager_ids(graph_runs, asked) -> None:
    assert_seeded_sampling_is_eagers(
        graph_runs["npu", "llama", asked], graph_runs["npu", "llama", "eager"]
    )


def assert_host_decode_is_vllms(runs: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    """Every decode step of every NPU run (eager and graphs) made its positions, lengths,
    slots and input ids on the host (adapters/vllm/worker/host_decode_inputs.py); each was
    made again
    by vLLM's device way over the same buffers (host_decode_check.py): the same values,
    at every batch size the runs decoded at."""
    for key, result in runs.items():
        if key[0] != "npu":
            continue
        checked = result["host_decode"]
        assert checked["mismatches"] == [], (key, checked["mismatches"][:3])
        # The prompts decode together at several batch sizes, then 8 in the costs.
        sizes = checked["batch_sizes"]
        assert checked["steps"] > 10 and len(sizes) >= 3 and 8 in sizes, (key, sizes)


def test_decode_inputs_made_on_the_host_are_vllms(graph_runs) -> None:
    assert_host_decode_is_vllms(graph_runs)


def test_full_graphs_whose_attention_lengths_are_not_updated_give_other_ids(graph_runs) -> None:
    """The same FULL_DECODE_ONLY run with the runtime's graphs forgetting the update
    (unit.fakes.graphs): each replay's attention reads the lengths of its capture."""
    stale = graph_runs["npu", "llama", STALE]
    assert stale["graph_mode"] == "FULL_DECODE_ONLY" and stale["captured"] == 4
    assert stale["counters"]["graph_replays"] > 0
    eager = graph_runs["npu", "llama", "eager"]["runs"]
    assert stale["runs"] != eager
    # The first token comes from the prefill, which runs without graphs.
    assert [r[0] for r in stale["runs"][0]] == [r[0] for r in eager[0]]


@pytest.fixture(scope="module")
def doctor_plans(npu_model_dirs: dict[str, str]) -> dict[tuple[str, str], dict[str, Any]]:
    """`ascend-doctor plan --json` of each graph run's arguments on the emulated NPU, all
    in one child process (support.doctor_plans)."""
    from support.doctor_plans import doctor_plans as plans
    from support.torch_npu_emulator.activate import child_env

    env = child_env({k: v for k, v in os.environ.items() if not k.startswith("VLLM_ASCEND_")})
    env["VLLM_ASCEND_DEVICE"] = "npu"
    args = ["--dtype", "bfloat16", "--block-size", "128", "-cc.cudagraph_capture_sizes=[1,2,4,8]"]
    argvs = [[npu_model_dirs[style], *args,
              *([] if asked == DEFAULT else [f"-cc.cudagraph_mode={asked}"])]
             for style, asked in GRAPH_RUNS]  # fmt: skip
    return dict(zip(GRAPH_RUNS, plans(argvs, env), strict=True))


@pytest.mark.parametrize(("style", "asked"), list(GRAPH_RUNS), ids=RUN_IDS)
def test_the_doctor_reports_the_graph_mode_the_engine_runs(
    graph_runs, doctor_plans, style: str, asked: str
) -> None:
    data = doctor_plans[style, asked]["data"]
    plan = data["plan"]
    engine = graph_runs["npu", style, asked]
    assert f"npu_graph_mode={engine['graph_mode']}," in plan, plan
    assert data["execution"]["graph_mode"] == engine["graph_mode"]  # what runs, not asked
    assert data["graphs"]["mode"] == engine["graph_mode"]
    assert data["graphs"]["capture_sizes"] == engine["capture_sizes"]
    if asked == DEFAULT:  # the plan's choice is a change from unset, with its reason
        assert f"cudagraph_mode: unset -> {engine['graph_mode']} (unset; " in plan, plan
