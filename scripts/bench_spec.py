"""Benchmark (not a test): decode with and without speculation (n-gram, or a draft method).

    .venv/bin/python scripts/bench_spec.py [--model models/tiny-llama_repeat] [--k 3] \
        [--device cpu|npu] [--method ngram|mtp|eagle|eagle3|draft_model]

--method mtp serves `deepseek_v3_mtp` (scripts/make_models.py; at the npu-mla shapes on
--device npu) with its MTP layer; eagle, eagle3 and draft_model draft for the model with
make_draft's draft of that kind. The rest is as for ngram below.

Each mode runs in its own child process (one vLLM engine each, in-process engine core,
eager, fp32) on a repetitive prompt: a short random phrase repeated to --prompt-len
tokens, --batch copies with different phrases, --new greedy tokens each. Printed per
mode: generated tokens per second over the timed pass (after one warm-up pass), and for
ngram the draft tokens proposed and accepted in that pass (vLLM's spec-decode counters).
Both modes run one after the other: numbers are only comparable on a quiet machine. The default
model (scripts/make_models.py --style llama_repeat) repeats itself, the case n-gram
lookup is for; on a model that does not, ngram only adds work.

--device npu --graphs: a third run, the method in FULL_DECODE_ONLY (no enforce_eager,
compilation mode NONE): each uniform verify step of 1 + k tokens a request one NPU graph
replay; printed with its replays per generated token.

--device npu: the same on the emulated NPU (support.torch_npu_emulator; bf16, block 128),
where the figure is the device's counters over the timed pass per generated token:
host launches (aten ops through the device plus torch_npu kernels) and device-to-host
syncs. Tokens/s there times the emulator, not an NPU. Nothing here runs on Ascend.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRAPHS = "-graphs"  # the method's mode with FULL_DECODE_ONLY graphs (--graphs)


def _prompts(batch: int, length: int) -> list[list[int]]:
    rng = random.Random(0)
    out = []
    for _ in range(batch):
        phrase = [rng.randrange(2, 500) for _ in range(rng.randrange(4, 12))]
        out.append((phrase * (length // len(phrase) + 1))[:length])
    return out


def _spec_counters(llm: object) -> tuple[int, int]:
    """vLLM's draft tokens proposed and accepted so far (0, 0 without speculation)."""
    metrics = {m.name: getattr(m, "value", 0) for m in llm.get_metrics()}  # type: ignore[attr-defined]
    return (int(metrics.get("vllm:spec_decode_num_draft_tokens", 0)),
            int(metrics.get("vllm:spec_decode_num_accepted_tokens", 0)))


def _device_counters(npu: bool) -> dict[str, int]:
    if not npu:
        return {}
    from support.emulated_npu_device import counters, launches, syncs

    c = counters()
    return {"launches": launches(c), "syncs": syncs(c), "replays": c["graph_replays"]}


def child(args: argparse.Namespace) -> None:
    npu = args.device == "npu"
    os.environ.setdefault("VLLM_ASCEND_DEVICE", args.device)
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if npu:
        from support.torch_npu_emulator.activate import activate

        activate()
    from vllm import LLM, SamplingParams, TokensPrompt

    graphs = args.mode.endswith(GRAPHS)
    mode = args.mode.removesuffix(GRAPHS)
    spec: dict[str, object] | None = None
    if mode == "ngram":
        spec = {"method": "ngram", "num_speculative_tokens": args.k,
                "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    elif mode != "plain":
        spec = {"method": mode, "num_speculative_tokens": args.k}
        if args.draft:
            spec["model"] = args.draft
    device_args = {"dtype": "bfloat16", "block_size": 128} if npu else {"dtype": "float32"}
    if graphs:  # FULL_DECODE_ONLY needs no piecewise compiler: compilation mode NONE
        device_args["compilation_config"] = {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}
    llm = LLM(model=args.model, enforce_eager=not graphs, max_model_len=1024,
              max_num_seqs=args.batch, kv_cache_memory_bytes=256 << 20, seed=0,
              speculative_config=spec, disable_log_stats=False, **device_args)
    params = SamplingParams(max_tokens=args.new, temperature=0.0, ignore_eos=True)
    prompts = [TokensPrompt(prompt_token_ids=p) for p in _prompts(args.batch, args.prompt_len)]
    llm.generate(prompts, params, use_tqdm=False)  # warm-up (and the prefix cache)
    before = _spec_counters(llm)
    if npu:
        from support.emulated_npu_device import reset_counters

        reset_counters()
    start = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    device = _device_counters(npu)
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    after = _spec_counters(llm)
    print(json.dumps({
        "mode": args.mode, "tokens": tokens, "seconds": seconds,
        "drafts": after[0] - before[0], "accepted": after[1] - before[1],
        "ids": [list(o.outputs[0].token_ids) for o in outs], **device,
    }))
    llm.llm_engine.engine_core.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None,
                        help="default: models/tiny-llama_repeat; with --method mtp "
                             "deepseek_v3_mtp (npu-mla shapes on --device npu)")
    parser.add_argument("--method", default="ngram",
                        choices=("ngram", "mtp", "eagle", "eagle3", "draft_model"))
    parser.add_argument("--draft", default="", help=argparse.SUPPRESS)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=96)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--device", choices=("cpu", "npu"), default="cpu",
                        help="cpu: the host device; npu: the emulated NPU (test support)")
    parser.add_argument("--graphs", action="store_true",
                        help="--device npu: also the method in FULL_DECODE_ONLY (each "
                             "uniform verify step one NPU graph replay)")
    parser.add_argument("--mode", help=argparse.SUPPRESS)  # plain or the method
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))  # the emulated NPU (test support)
    if args.mode:
        child(args)
        return 0
    env = dict(os.environ)
    if args.device == "npu":
        from support.torch_npu_emulator.activate import child_env

        env = child_env(env)
        env.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, str(ROOT / "scripts"))
    from make_models import make_draft, make_model

    if args.model is None:
        if args.method == "mtp":
            size = "npu-mla" if args.device == "npu" else "tiny"
            args.model = str(make_model(ROOT / f"models/{size}-deepseek_v3_mtp",
                                        "deepseek_v3_mtp", size))
        else:
            args.model = str(make_model(ROOT / "models/tiny-llama_repeat", "llama_repeat",
                                        "tiny"))
    kind = {"eagle": "eagle", "eagle3": "eagle3", "draft_model": "draft"}.get(args.method)
    if kind:
        target = Path(args.model)
        args.draft = str(make_draft(target.parent / f"{target.name}-{kind}", target, kind))
    results = {}
    modes = ["plain", args.method]
    if args.graphs and args.device == "npu":
        modes.append(args.method + GRAPHS)
    for mode in modes:
        cmd = [sys.executable, __file__, "--mode", mode, "--model", args.model,
               "--draft", args.draft, "--method", args.method,
               "--k", str(args.k), "--batch", str(args.batch),
               "--prompt-len", str(args.prompt_len), "--new", str(args.new),
               "--device", args.device]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
        if done.returncode or not lines:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        results[mode] = json.loads(lines[-1])
    for mode, r in results.items():
        rate = r["tokens"] / r["seconds"]
        extra = ""
        if r["drafts"]:
            extra = (f", {int(r['accepted'])}/{int(r['drafts'])} drafts accepted "
                     f"({r['accepted'] / r['drafts']:.0%})")
        if "launches" in r:
            extra += (f"; per generated token: {r['launches'] / r['tokens']:.1f} host "
                      f"launches, {r['syncs'] / r['tokens']:.2f} device-to-host syncs, "
                      f"{r['replays'] / r['tokens']:.2f} graph replays")
        print(f"{mode:6s} k={args.k if mode != 'plain' else 0}: {r['tokens']} tokens in "
              f"{r['seconds']:.2f} s = {rate:.1f} tokens/s{extra}")
    plain, spec = results["plain"], results[args.method]
    speedup = (spec["tokens"] / spec["seconds"]) / (plain["tokens"] / plain["seconds"])
    print(f"{args.method}/plain: {speedup:.2f}x; same greedy ids: {plain['ids'] == spec['ids']}")
    if args.method + GRAPHS in results:
        same = results[args.method + GRAPHS]["ids"] == spec["ids"]
        print(f"{args.method}{GRAPHS}: same greedy ids as eager {args.method}: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
