"""Expert parallel with TP=4 on four emulated A3 NPUs, run by hand (not a CI test: four
ranks on this 2-core machine cost minutes; issue 44's "and 4 where it fits the machine").

A Qwen3-MoE-style model whose heads (4), KV heads (4) and routed experts (8) divide by 4
(make_models' npu-ep4 size: npu-ep with 4 KV heads) runs through npu_expert_parallel_run.py
twice, one after the other: TP=1 eager on one emulated NPU (the reference, with each step's
top-2 logprobs), then TP=4 + EP on four emulated A3 NPUs with the plan's default comm
methods (nothing forced) and graphs in the plan's default mode. The ids are compared as
test_expert_parallel_on_emulated_npu.py compares TP=2's: a parting is accepted only where
the reference's top-2 gap is below NEAR_TIE_NATS (bf16 near-tie), and every parting is
printed with its gap. A parting past that gap is judged as routing_ties judges the
DeepSeek-V3 model's (test_eplb_on_emulated_npu.py): the float32 model,
teacher-forced on the reference's tokens, shows its output top-3 there and each MoE
layer's router margin (qwen3_ties); a margin below ROUTING_TIE is a routing near-tie.
Each run's wall time and the peak resident memory of its process tree (sampled each
0.5 s) are printed too. Exits non-zero on a loud parting (no output or routing near-tie)
or a rank whose MoE layers did not exchange.

Run as: PYTHONPATH=src:tests python tests/integration/npu/npu_expert_parallel_tp4_by_hand.py
[TP] (TP defaults to 4), under `flock /tmp/heavy.lock`. An emulator, not Ascend hardware.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from integration.npu.npu_expert_parallel_run import decode_prompts, prompts
from support.child_runs import last_result
from support.hf_reference import MODELS_DIR, make_model
from support.torch_npu_emulator.activate import child_env

RUNNER = Path(__file__).with_name("npu_expert_parallel_run.py")
A3 = "Ascend910_9391"
NEAR_TIE_NATS = 0.25  # as test_expert_parallel_on_emulated_npu.py
# A Qwen3-MoE router's near-tie: its top_k-th and next softmax probabilities within this
# (support.routing_ties' ROUTING_TIE, there in sigmoid score, here in softmax probability).
ROUTING_TIE = 0.02


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def run(model: str, tp: int) -> tuple[dict[str, Any], float, int]:
    """One runner child: its RESULT, wall seconds, peak RSS of its process tree (bytes)."""
    env = child_env(dict(os.environ), soc_name=A3, device_count=max(tp, 1))
    for key in ("VLLM_ASCEND_DEVICE", "VLLM_ASCEND_MOE_COMM_METHOD"):
        env.pop(key, None)
    env["OMP_NUM_THREADS"] = "1"
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, str(RUNNER), model, str(tp)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        ps = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                peak[0] = max(peak[0], _tree_rss(ps))
            except psutil.Error:
                return
            done.wait(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = last_result(proc)
    finally:
        done.set()
        sampler.join()
    return result, time.monotonic() - start, peak[0]


def _where(ids: list[list[int]], ref: list[list[int]]) -> list[tuple[int, int]]:
    """(sequence, first step off the reference) of each parted sequence."""
    out = []
    for seq, (got, want) in enumerate(zip(ids, ref, strict=True)):
        step = next((j for j, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), None)
        if step is not None:
            out.append((seq, step))
    return out


def partings(
    ids: list[list[int]], ref: list[list[int]], top2: list[Any]
) -> list[tuple[str, float]]:
    found = []
    for seq, (got, want) in enumerate(zip(ids, ref, strict=True)):
        step = next((j for j, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), None)
        if step is None:
            continue
        first, second = top2[seq][step]
        found.append((f"prompt {seq} step {step}: {got[step]} for {want[step]} "
                      f"(gap {first - second:.3f})", first - second))
    return found


def qwen3_ties(model: str, prompt: list[int], generated: list[int]) -> dict[str, Any]:
    """The float32 model teacher-forced on prompt + generated: at the last position its
    output's top-3 (ids, logprobs) and each MoE layer's router margin (the top_k-th
    softmax probability minus the next one's); support.routing_ties does this for the
    DeepSeek-V3 router only."""
    import torch
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    k = hf.config.num_experts_per_tok
    gates = {n: m for n, m in hf.named_modules() if n.endswith("mlp.gate")}
    seen: dict[str, torch.Tensor] = {}
    hooks = [g.register_forward_hook(
        lambda mod, inp, out, n=n: seen.__setitem__(n, out[0] if isinstance(out, tuple) else out))
        for n, g in gates.items()]
    try:
        with torch.no_grad():
            logits = hf(torch.tensor([prompt + generated])).logits[0, -1]
    finally:
        for hook in hooks:
            hook.remove()
    top = torch.log_softmax(logits, -1).topk(3)
    margins = {}
    for name, out in seen.items():
        p = torch.softmax(out.reshape(len(prompt) + len(generated), -1)[-1].float(), -1)
        p = p.sort(descending=True).values
        margins[name] = round(float(p[k - 1] - p[k]), 4)
    return {"f32_top3": [[i, round(v, 3)] for i, v in zip(top.indices.tolist(),
                                                           top.values.tolist(), strict=True)],
            "router_margins": margins}


def main(tp: int) -> int:
    model = str(make_model(MODELS_DIR / "npu-ep4-qwen3_moe", "qwen3_moe", "npu-ep4"))
    ref, ref_s, ref_rss = run(model, 1)
    print(f"TP=1 eager: {ref_s:.0f} s, peak RSS {ref_rss / 2**30:.2f} GiB", flush=True)
    ep, ep_s, ep_rss = run(model, tp)
    print(f"TP={tp} + EP: {ep_s:.0f} s, peak RSS {ep_rss / 2**30:.2f} GiB", flush=True)
    loud = []
    passes = (("prompts", ep["ids"], ref["ids"], ref["top2"], prompts()),
              ("decode", ep["decode_ids"], ref["decode_ids"], ref["decode_top2"],
               decode_prompts()))
    for name, ids, want, top2, given in passes:
        found = partings(ids, want, top2)
        print(f"{name}: partings {[w for w, _ in found] or 'none'}", flush=True)
        for (what, gap), (seq, step) in zip(found, _where(ids, want), strict=True):
            if gap < NEAR_TIE_NATS:
                continue
            ties = qwen3_ties(model, given[seq], want[seq][:step])
            print(f"  {what}: {json.dumps(ties)}", flush=True)
            if min(ties["router_margins"].values()) >= ROUTING_TIE:
                loud.append(what)
    ranks = ep["ranks"]
    for r, rank in enumerate(ranks):
        print(f"rank {r}: {json.dumps(rank)}")
    for r, rank in enumerate(ep["decode_ranks"]):
        print(f"rank {r} decode ({ep['decode_steps']} steps): {json.dumps(rank)}")
    exchanged = len(ranks) == tp and all(rank["exchanges"] and all(rank["exchanges"])
                                         for rank in ranks)
    print("SUMMARY " + json.dumps({
        "tp": tp, "ranks": len(ranks), "every_moe_layer_exchanged": exchanged,
        "loud_partings": loud, "tp1_s": round(ref_s), "ep_s": round(ep_s),
        "tp1_peak_rss_gib": round(ref_rss / 2**30, 2), "ep_peak_rss_gib": round(ep_rss / 2**30, 2),
        "ids": ep["ids"], "ref_ids": ref["ids"],
        "decode_ids": ep["decode_ids"], "ref_decode_ids": ref["decode_ids"],
    }), flush=True)
    return 0 if exchanged and not loud else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 4))
