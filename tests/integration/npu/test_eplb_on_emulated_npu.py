"""vLLM's EPLB (--enable-eplb) on two emulated A3 NPUs: a Qwen3-MoE-style model with TP=2 +
expert parallel and 2 redundant experts (10 physical experts, 5 a rank), a rebalance every
6 steps over a 4-step load window, graphs in the plan's default mode, gives the
single-device ids before and after a rebalance, and the rebalance really moved experts.

Each NPU EPLB engine exchanges by another method: VLLM_ASCEND_MOE_COMM_METHOD forces MC2
on the Qwen3-MoE engine and all-to-all on the DeepSeek-V3 bf16 one; the W8A8_DYNAMIC
engine keeps the plan's own choice (MC2 for the decode steps, all-to-all for the prefill
chunks above MC2's capacity; the same choice as test_serve_dp_ep_emulated_npu.py's). After
the prompt passes each serves a decode pass (every step a graph replay, a rebalance
inside it) around which the emulator's counters are read: with MC2 every replay runs each
MoE layer's dispatch and combine, none launched from the host; forced all-to-all's
captured steps run the partial sums instead (ascend_core/moe/in_graphs.py) and its eager
prefill chunks exchange by all-to-all.

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
against HF transformers' float32 greedy ids.

A DeepSeek-V3-style model (MLA + MoE, npu-ep-mla: two MoE layers of 16 experts, grouped
sigmoid routing, a shared expert) serves the same EPLB deployment (18 physical experts, 9
a rank), in bf16 against its TP=1 reference, and exported as W8A8_DYNAMIC, whose
rebalance moves the int8 weights (on the NPU in their transposed [E, in, out] layout)
with their per-channel scales: the scales the experts' math reads stay views of the
parameters vLLM's rearrange moves, and follow the map like the weights. The W8A8_DYNAMIC
reference is the host's TP=2 + EP with the same EPLB, in bf16 (not TP=1: the row-parallel
W8A8_DYNAMIC layers quantize each rank's half of a token on its own,
test_expert_parallel_w8a8_on_emulated_npu.py says why), itself across its rebalances. A
DeepSeek-V3 sequence may part only at a near-tie of the reference's output or, in the
float32 oracle, of a router at that token (support.routing_ties). Four engines side by
side, after the Qwen3-MoE ones. An emulator, not Ascend hardware.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from integration.npu.npu_eplb_run import weights_follow_the_map
from integration.npu.npu_expert_parallel_run import DECODE_PROMPTS, MC2_OPS
from support.child_runs import last_result, read_all
from support.hf_reference import MODELS_DIR, greedy_generate, make_model
from support.quant_reference import local_export
from support.routing_ties import loud_partings, routing_ties
from support.torch_npu_emulator.activate import child_env

RUNNER = Path(__file__).with_name("npu_eplb_run.py")
A3 = "Ascend910_9391"
NEAR_TIE_NATS = 0.25  # test_expert_parallel_on_emulated_npu.py's bf16 rule
HOST_NEAR_TIE_NATS = 1e-3  # float32: EP's partial sums only reorder additions
LOGICAL, REDUNDANT, EP = 8, 2, 2
MLA_LOGICAL = 16
STEP_INTERVAL = 6  # npu_eplb_run's: a rebalance every 6 engine steps
# The methods each NPU EPLB engine's MoE layers serve by (the plan's, sorted):
# VLLM_ASCEND_MOE_COMM_METHOD forces MC2 on the Qwen3-MoE engine and all-to-all on the
# DeepSeek-V3 bf16 one; the W8A8_DYNAMIC engine keeps the plan's own choice (MC2 for
# steps within its capacity of 8 tokens, the decode steps; all-to-all above).
METHODS = {("runs", "eplb"): ["mc2"], ("mla_runs", "eplb"): ["alltoall"],
           ("mla_runs", "w8a8"): ["alltoall", "mc2"]}


def _start(model: str, mode: str, device: str = "npu",
           method: str | None = None) -> subprocess.Popen[str]:
    """One run of RUNNER; `method`: VLLM_ASCEND_MOE_COMM_METHOD (unset: the plan's)."""
    env = dict(os.environ)
    if device == "npu":
        env = child_env(env, soc_name=A3, device_count=2)  # else cpu (float32) or cpu-bf16
    for key in ("VLLM_ASCEND_DEVICE", "VLLM_ASCEND_MOE_COMM_METHOD"):
        env.pop(key, None)
    if method is not None:
        env["VLLM_ASCEND_MOE_COMM_METHOD"] = method
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.Popen(
        [sys.executable, str(RUNNER), model, mode, *([] if device == "npu" else [device])],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    return last_result(proc, 600)


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    model = str(make_model(MODELS_DIR / "npu-ep-qwen3_moe", "qwen3_moe", "npu-ep"))
    procs = {"ref": _start(model, "ref"), "eplb": _start(model, "eplb", method="mc2"),
             "host": _start(model, "eplb", "cpu")}
    results = read_all(procs, _result)
    results["model"] = {"dir": model}
    return results


@pytest.fixture(scope="module")
def mla_runs() -> dict[str, dict[str, Any]]:
    """DeepSeek-V3-style: bf16 (TP=1 reference, EPLB with all-to-all forced),
    W8A8_DYNAMIC (EPLB with the plan's methods on the NPU and, the reference, on the host
    in bf16)."""
    bf16 = str(make_model(MODELS_DIR / "npu-ep-mla-deepseek_v3", "deepseek_v3", "npu-ep-mla"))
    w8a8 = str(local_export("deepseek_v3", "w8a8_dynamic", size="npu-ep-mla"))
    procs = {"ref": _start(bf16, "ref"), "eplb": _start(bf16, "eplb", method="alltoall"),
             "w8a8": _start(w8a8, "eplb"), "w8a8_host": _start(w8a8, "eplb-top2", "cpu-bf16")}
    results = read_all(procs, _result)
    results["model"] = {"bf16": bf16, "w8a8": w8a8}
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
    """MC2 forced: the prompt passes and the decode pass, each across a rebalance."""
    run, ref = runs["eplb"], runs["ref"]
    assert not _partings(run["ids"], ref), (run["ids"], ref["ids"])
    assert not _partings(run["ids_after_rebalance"], ref), (run["ids_after_rebalance"],
                                                            ref["ids"])
    decode_ref = {"ids": ref["decode_ids"], "top2": ref["decode_top2"]}
    assert not _partings(run["decode_ids"], decode_ref), (run["decode_ids"], ref["decode_ids"])


@pytest.mark.parametrize(("model", "device"), list(METHODS))
def test_eplb_exchanges_by_the_forced_or_the_plans_method(request, model, device) -> None:
    """Every MoE layer of each rank exchanges its tokens (the physical experts the map
    names) by the method forced, or by the plan's; the prompt passes' chunks above the
    capture sizes run eagerly, so their exchanges are launched from the host."""
    run, methods = request.getfixturevalue(model)[device], METHODS[(model, device)]
    for rank in run["ranks"]:
        assert len(rank["exchanges"]) == 2 and all(rank["exchanges"]), rank
        assert rank["plan_methods"] == methods, rank
        if "mc2" in methods:
            assert rank["dispatch"] > 0 and rank["combine"] == rank["dispatch"], rank
        else:
            assert rank["dispatch"] == rank["combine"] == 0, rank
        assert (rank["init_routing"] > 0) == ("alltoall" in methods), rank


@pytest.mark.parametrize(("model", "device"), list(METHODS))
def test_decode_replays_exchange_across_a_rebalance(request, model, device) -> None:
    """The decode pass (one-token prompts, every step a graph replay) spans a rebalance.
    Where the decode steps exchange by MC2 (forced, or the plan's for steps within its
    capacity) every replay runs each MoE layer's dispatch and combine, none launched from
    the host; forced all-to-all reads its splits on the host, so its captured steps run
    each rank's experts and the TP all-reduce of the partial sums (ascend_core/moe/
    in_graphs.py): no exchange in its replays. Nothing is read back per MoE layer, and
    after the pass every slot holds the weights of the expert the new map names."""
    run, methods = request.getfixturevalue(model)[device], METHODS[(model, device)]
    steps = run["decode_steps"]
    assert steps > STEP_INTERVAL
    before, after = run["after_second"], run["after_decode"]
    for r, (rank, layers) in enumerate(zip(run["decode_ranks"], run["ranks"], strict=True)):
        # `steps` replays when the engine core sees the prompts at once, up to
        # DECODE_PROMPTS - 1 more when they reach it one by one.
        replays = rank["graph_replays"]
        assert steps <= replays <= steps + DECODE_PROMPTS - 1, rank
        assert rank["launched"] == {op: 0 for op in MC2_OPS}, rank
        moe_layers = len(layers["exchanges"])
        per_replay = moe_layers if "mc2" in methods else 0
        assert rank["replayed"] == {op: per_replay * replays for op in MC2_OPS}, rank
        # A rebalance came inside the pass (watch_rebalances counts them); its own host
        # reads (vLLM's rearrange: the load, the new map, the transfer plan) aside,
        # fewer reads than one per MoE layer and step.
        rebalances = after[r]["rebalances"] - before[r]["rebalances"]
        rebalance_syncs = after[r]["rebalance_syncs"] - before[r]["rebalance_syncs"]
        print(f"decode pass, {device} rank {r}: {replays} replays, {rank['syncs']} host "
              f"reads, {rebalance_syncs} of them in {rebalances} rebalance(s); {rank}")
        assert rebalances >= 1, (before[r], after[r])
        assert rank["syncs"] - rebalance_syncs < moe_layers * replays, rank
    assert after[0]["physical_to_logical"] == after[1]["physical_to_logical"]
    weights_follow_the_map(run["start"], after, "after the decode pass")
    if device == "w8a8":
        weights_follow_the_map(run["start"], after, "scales, decode pass", "scales")


@pytest.mark.parametrize(("model", "device"), [
    ("runs", "eplb"), ("runs", "host"), ("mla_runs", "eplb"), ("mla_runs", "w8a8"),
    ("mla_runs", "w8a8_host"),
])
def test_the_rebalance_changed_the_map_and_moved_the_weights(request, model, device) -> None:
    """Qwen3-MoE (NPU, host) and DeepSeek-V3 (bf16 on the NPU; W8A8_DYNAMIC on the NPU and
    the host): every slot holds, after each pass, the weights (and the scales the
    quantized experts' math reads) of the logical expert the new map names."""
    run = request.getfixturevalue(model)[device]
    start, after = run["start"], run["after_first"]
    # Every rank agrees on the map; the load was recorded; the map changed.
    assert start[0]["physical_to_logical"] == start[1]["physical_to_logical"]
    assert after[0]["physical_to_logical"] == after[1]["physical_to_logical"]
    assert after[0]["load_window_sum"] > 0
    before_map, after_map = start[0]["physical_to_logical"], after[0]["physical_to_logical"]
    assert before_map != after_map, before_map
    assert weights_follow_the_map(start, after, "after the first pass") > 0
    weights_follow_the_map(start, run["after_second"], "after the second pass")
    if device.startswith("w8a8"):
        for view in (*start, *after, *run["after_second"]):
            assert view["quant_methods"] == ["AscendW8A8DynamicMoeMethod"], view
            assert view["weight_dtypes"] == ["int8"] and view["scale_views"] == [True] * 2
        assert weights_follow_the_map(start, after, "scales, first pass", "scales") > 0
        weights_follow_the_map(start, run["after_second"], "scales, second pass", "scales")


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


def _mla_loud(run: dict[str, Any], ref: dict[str, Any], export: str, top2: str = "top2",
              ids: str = "ids", ref_ids: str = "ids", prompts: str = "prompts") -> list[str]:
    return loud_partings(
        run[ids], ref[ref_ids], ref[top2],
        lambda seq, gen: routing_ties(export, 2, run[prompts][seq], gen))


def test_mla_moe_serves_eplb_with_redundant_experts_per_rank(mla_runs) -> None:
    for device in ("eplb", "w8a8", "w8a8_host"):
        for rank in mla_runs[device]["start"]:
            assert rank["local_experts"] == [(MLA_LOGICAL + REDUNDANT) // EP] * 2, rank
            assert rank["eplb_layers"] == 2, (device, rank)
            assert all(rank["exchanges"]) == (device != "w8a8_host"), (device, rank)
            assert all(len(m) == MLA_LOGICAL + REDUNDANT for m in rank["physical_to_logical"])


def test_mla_bf16_ids_equal_the_single_device_ones_across_a_rebalance(mla_runs) -> None:
    """All-to-all forced: the prompt passes and the decode pass, each across a rebalance."""
    run, ref, export = mla_runs["eplb"], mla_runs["ref"], mla_runs["model"]["bf16"]
    assert not _mla_loud(run, ref, export), (run["ids"], ref["ids"])
    assert not _mla_loud(run, ref, export, ids="ids_after_rebalance"), (
        run["ids_after_rebalance"], ref["ids"])
    assert not _mla_loud(run, ref, export, "decode_top2", "decode_ids", "decode_ids",
                         "decode_prompts"), (run["decode_ids"], ref["decode_ids"])


def test_mla_w8a8_dynamic_ids_equal_the_hosts_across_a_rebalance(mla_runs) -> None:
    """The NPU's W8A8_DYNAMIC EPLB (graphs, the exchange) against the host's (eager, its
    ranks' partial sums), each pass; and the host's own second pass, after more
    rebalances, against its first."""
    run, host, export = mla_runs["w8a8"], mla_runs["w8a8_host"], mla_runs["model"]["w8a8"]
    assert not _mla_loud(run, host, export), (run["ids"], host["ids"])
    assert not _mla_loud(run, host, export, ids="ids_after_rebalance"), (
        run["ids_after_rebalance"], host["ids"])
    assert not _mla_loud(host, host, export, ids="ids_after_rebalance"), (
        host["ids_after_rebalance"], host["ids"])
