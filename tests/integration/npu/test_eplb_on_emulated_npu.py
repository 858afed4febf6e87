"""vLLM's EPLB (--enable-eplb) on two emulated A3 NPUs: a Qwen3-MoE-style model with TP=2 +
expert parallel and 2 redundant experts (10 physical experts, 5 a rank), a rebalance every
6 steps over a 4-step load window, graphs in the plan's default mode, gives the
single-device ids before and after a rebalance, and the rebalance really moved experts.

The NPU MoE method routes each token to its logical experts, maps them to physical ones
through vLLM's logical -> physical map (one replica chosen per token, the load recorded:
adapters/torch/eplb_map.py) and the core's exchange (MC2 / all-to-all) sends the rows to
the rank holding that physical expert. vLLM's EplbState decides the new placement from the
recorded load and rearranges the expert weights over the EP group (torch.distributed P2P
on the device group, the emulated HCCL), then updates the maps in place, so captured
graphs replay with the new placement.

The reference is TP=1 eager on one emulated NPU in bf16: a sequence may part from it only
where the reference's top-2 logprobs were a near-tie (the gap is in the failure message).
One EPLB engine serves every NPU case here; the reference is a second process beside it.
The host serves the same deployment in float32 over gloo (its golden reference: the same
map and load record, vLLM's rearrange moving weights by P2P over the EP group), held
against HF transformers' float32 greedy ids. An emulator, not Ascend hardware.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.child_runs import last_result, read_all
from support.hf_reference import MODELS_DIR, greedy_generate, make_model
from support.torch_npu_emulator.activate import child_env

RUNNER = Path(__file__).with_name("npu_eplb_run.py")
A3 = "Ascend910_9391"
NEAR_TIE_NATS = 0.25  # test_expert_parallel_on_emulated_npu.py's bf16 rule
HOST_NEAR_TIE_NATS = 1e-3  # float32: EP's partial sums only reorder additions
LOGICAL, REDUNDANT, EP = 8, 2, 2


def _start(model: str, mode: str, device: str = "npu") -> subprocess.Popen[str]:
    env = dict(os.environ)
    if device == "npu":
        env = child_env(env, soc_name=A3, device_count=2)
    for key in ("VLLM_ASCEND_DEVICE", "VLLM_ASCEND_MOE_COMM_METHOD"):
        env.pop(key, None)
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.Popen(
        [sys.executable, str(RUNNER), model, mode, *(["cpu"] if device == "cpu" else [])],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    return last_result(proc, 600)


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    model = str(make_model(MODELS_DIR / "npu-ep-qwen3_moe", "qwen3_moe", "npu-ep"))
    procs = {mode: _start(model, mode) for mode in ("ref", "eplb")}
    procs["host"] = _start(model, "eplb", "cpu")
    results = read_all(procs, _result)
    results["model"] = {"dir": model}
    return results


def _partings(ids: list[list[int]], reference: dict[str, Any],
              near_tie: float = NEAR_TIE_NATS) -> list[str]:
    """Where a sequence leaves the reference at a step that was no near-tie (all partings
    are printed with their top-2 gap)."""
    found = []
    for seq, (got, want) in enumerate(zip(ids, reference["ids"], strict=True)):
        step = next((j for j, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), None)
        if step is None:
            continue
        first, second = reference["top2"][seq][step]
        found.append((f"prompt {seq} step {step}: {got[step]} for {want[step]} "
                      f"(gap {first - second:.3f})", first - second))
    print("partings:", [what for what, _ in found] or "none")
    return [what for what, gap in found if gap >= near_tie]


def test_every_moe_layer_serves_eplb_with_redundant_experts_per_rank(runs) -> None:
    for rank in runs["eplb"]["start"]:
        assert rank["local_experts"] == [(LOGICAL + REDUNDANT) // EP] * 2, rank
        assert rank["eplb_layers"] == 2 and all(rank["exchanges"]), rank
        assert all(len(layer) == LOGICAL + REDUNDANT for layer in rank["physical_to_logical"])


def test_ids_equal_the_single_device_ones_before_and_after_a_rebalance(runs) -> None:
    run, ref = runs["eplb"], runs["ref"]
    assert not _partings(run["ids"], ref), (run["ids"], ref["ids"])
    assert not _partings(run["ids_after_rebalance"], ref), (run["ids_after_rebalance"],
                                                            ref["ids"])


@pytest.mark.parametrize("device", ["eplb", "host"])
def test_the_rebalance_changed_the_map_and_moved_the_weights(runs, device) -> None:
    run = runs[device]
    start, after = run["start"], run["after_first"]
    # Every rank agrees on the map; the load was recorded; the map changed.
    assert start[0]["physical_to_logical"] == start[1]["physical_to_logical"]
    assert after[0]["physical_to_logical"] == after[1]["physical_to_logical"]
    assert after[0]["load_window_sum"] > 0
    before_map, after_map = start[0]["physical_to_logical"], after[0]["physical_to_logical"]
    assert before_map != after_map, before_map
    assert _weights_follow_the_map(start, after, "after the first pass") > 0
    _weights_follow_the_map(start, run["after_second"], "after the second pass")


def _weights_follow_the_map(start: list[dict[str, Any]], state: list[dict[str, Any]],
                            when: str) -> int:
    """Each physical slot holds the weights of the logical expert the map names: the
    fingerprints of the start-up placement, looked up through the new map. Returns how
    many slots hold another logical expert than at start-up."""
    layers, moved = len(start[0]["weights"]), 0
    per_rank = len(start[0]["weights"][0])
    for layer in range(layers):
        logical_print: dict[int, float] = {}
        for rank, view in enumerate(start):
            for slot, value in enumerate(view["weights"][layer]):
                logical_print[view["physical_to_logical"][layer][rank * per_rank + slot]] = value
        for rank, view in enumerate(state):
            for slot, value in enumerate(view["weights"][layer]):
                physical = rank * per_rank + slot
                logical = view["physical_to_logical"][layer][physical]
                assert value == pytest.approx(logical_print[logical], rel=1e-6), (
                    when, layer, rank, slot, logical)
                moved += logical != start[rank]["physical_to_logical"][layer][physical]
    return moved


def test_host_ids_equal_hf_float32_before_and_after_a_rebalance(runs) -> None:
    """The host's gloo EP with EPLB (float32), the golden reference of the same decisions,
    gives HF transformers' float32 greedy ids through its rebalances."""
    run = runs["host"]
    assert run["after_first"][0]["physical_to_logical"] != run["start"][0]["physical_to_logical"]
    hf = greedy_generate(runs["model"]["dir"], run["prompts"], len(run["ids"][0]), top_k=2,
                         ignore_eos=True)
    reference = {
        "ids": [g.token_ids for g in hf],
        "top2": [[sorted(step.values(), reverse=True)[:2] for step in g.top_logprobs]
                 for g in hf],
    }
    assert not _partings(run["ids"], reference, HOST_NEAR_TIE_NATS), (run["ids"],
                                                                       reference["ids"])
    assert not _partings(run["ids_after_rebalance"], reference, HOST_NEAR_TIE_NATS), (
        run["ids_after_rebalance"], reference["ids"])
