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
DEFAULT_MODEL = ROOT / "models" / "100m-llama"
# --style: the model the throughput runs on; the MoE styles at make_models' "small" size.
STYLE_MODELS = {
    "llama": ("100m", "Llama-style, ~100M parameters"),
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
        print(f"making the {what} model in {path} ...", file=sys.stderr, flush=True)
        make_model(str(path), style=style, size=size, seed=0)
    return path


# -- subprocesses ------------------------------------------------------------------


_WORKER_CONTROLLED = ("VLLM_PLUGINS", "VLLM_ASCEND_DEVICE", "OMP_NUM_THREADS",
                      "VLLM_OMP_NUM_THREADS_SET_BY_VLLM")


def _run_worker(script: str, args: list[str], env: dict[str, str], log: Path) -> dict[str, Any]:
    """Run one worker script in a fresh interpreter; its logs go to `log`, its result back."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    cmd = [sys.executable, str(SCRIPTS / script), *args, "--out", str(out)]
    # Only what this worker is given decides which plugins load and on which device.
    inherited = {k: v for k, v in os.environ.items() if k not in _WORKER_CONTROLLED}
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


def throughput(args: argparse.Namespace, log: Path) -> list[dict[str, Any]]:
    results = []
    for dtype in args.dtypes:
        threads = args.threads
        for side in ("plugin", "hf"):
            if args.threads is None and side == "plugin":
                # What an operator gets: no OMP_NUM_THREADS, so the plugin's config plan
                # decides (vLLM alone would drop the engine to 1 torch thread).
                env: dict[str, str] = {}
                thread_args: list[str] = []
            else:
                # HF runs on the thread count the plugin ended up with (or --threads).
                env = {"OMP_NUM_THREADS": str(threads)}
                thread_args = ["--threads", str(threads)]
            print(f"  throughput: {side} {dtype} (threads: "
                  f"{threads if thread_args else 'the plugin decides'}) ...",
                  file=sys.stderr, flush=True)
            load = os.getloadavg()[0]
            r = _run_worker(
                "bench_throughput.py",
                ["--side", side, "--model", str(args.model), "--dtype", dtype,
                 "--batches", ",".join(map(str, args.batches)),
                 "--prompt-len", str(args.prompt_len), "--output-len", str(args.output_len),
                 *thread_args],
                env, log,
            )
            r["load_avg_1m_before"] = load
            r["threads_forced"] = bool(thread_args)
            results.append(r)
            if side == "plugin":
                threads = max(run["torch_threads"] for run in r["runs"])
    return results


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
    rows = []
    by = {(r["side"], r["dtype"]): r for r in results}
    for dtype in dict.fromkeys(r["dtype"] for r in results):
        plugin, hf = by[("plugin", dtype)], by[("hf", dtype)]
        for p_run, h_run in zip(plugin["runs"], hf["runs"], strict=True):
            same_seq = sum(a == b for a, b in zip(p_run["token_ids"], h_run["token_ids"],
                                                  strict=True))
            rows.append({
                "dtype": dtype,
                "batch": p_run["batch"],
                "plugin_tok_s": p_run["tokens_per_s"],
                "hf_tok_s": h_run["tokens_per_s"],
                "ratio": p_run["tokens_per_s"] / h_run["tokens_per_s"],
                "plugin_s": p_run["seconds"],
                "hf_s": h_run["seconds"],
                "output_tokens": [p_run["output_tokens"], h_run["output_tokens"]],
                "lengths_ok": p_run["all_lengths_equal_output_len"]
                and h_run["all_lengths_equal_output_len"],
                "threads": [p_run["torch_threads"], h_run["torch_threads"]],
                "identical_sequences": f"{same_seq}/{len(p_run['token_ids'])}",
                "load_avg_1m": [plugin["load_avg_1m_before"], hf["load_avg_1m_before"]],
            })
    return rows


STAGES = ("import_vllm_ms", "register_ms", "resolve_platform_ms", "general_plugins_ms",
          "start_total_ms", "serve_imports_ms", "start_with_serve_imports_ms")
CONFIG = ("create_engine_config_ms", "check_and_update_config_ms", "plan_config_warm_ms",
          "translate_warm_ms")


def summarize_startup(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    def med(mode: str, key: str) -> float:
        return statistics.median(s[key] for s in samples[mode])

    stages = {k: {"vllm": med("vllm", k), "plugin": med("plugin", k)} for k in STAGES}
    for v in stages.values():
        v["added"] = v["plugin"] - v["vllm"]
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
              f"tokens (EOS ignored), warm-up excluded, prefix cache off; plugin = vllm.LLM "
              f"in-process engine with VLLM_ASCEND_DEVICE=cpu; HF = generate(use_cache=True, "
              f"left padding). tok/s = generated tokens / wall time of the call, prefill "
              f"included.")
        hdr = (f"{'dtype':<9} {'batch':>5} {'plugin tok/s':>13} {'HF tok/s':>9} "
               f"{'plugin/HF':>9} {'plugin s':>9} {'HF s':>7} {'tokens ok':>9} "
               f"{'same ids':>8} {'threads':>7} {'load':>9}")
        print(hdr)
        print("-" * len(hdr))
        for r in report["throughput"]:
            load = "/".join(f"{x:.1f}" for x in r["load_avg_1m"])
            print(f"{r['dtype']:<9} {r['batch']:>5} {r['plugin_tok_s']:>13.1f} "
                  f"{r['hf_tok_s']:>9.1f} {r['ratio']:>9.2f} {r['plugin_s']:>9.2f} "
                  f"{r['hf_s']:>7.2f} {'yes' if r['lengths_ok'] else 'NO':>9} "
                  f"{r['identical_sequences']:>8} {'/'.join(map(str, r['threads'])):>7} "
                  f"{load:>9}")
    if report.get("startup"):
        st = report["startup"]
        print()
        print(f"Start: median of {st['repeats']} fresh processes per side; vLLM alone = "
              f"VLLM_PLUGINS naming no plugin ({st['platforms']['vllm']}), plugin = "
              f"VLLM_ASCEND_DEVICE=cpu ({st['platforms']['plugin']}).")
        hdr = f"{'stage (ms)':<40} {'vLLM alone':>11} {'with plugin':>12} {'added':>9} {'ratio':>7}"
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
        }
        for key, label in names.items():
            v = st["stages_median_ms"][key]
            ratio = f"{v['ratio']:.2f}" if v["ratio"] else "-"
            print(f"{label:<40} {v['vllm']:>11.1f} {v['plugin']:>12.1f} "
                  f"{v['added']:>+9.1f} {ratio:>7}")
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
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
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
    t0 = time.perf_counter()
    report: dict[str, Any] = {
        "machine": machine_facts(args.threads),
        "settings": {"model": str(args.model), "style": args.style,
                     "prompt_len": args.prompt_len,
                     "output_len": args.output_len, "batches": args.batches,
                     "dtypes": args.dtypes},
    }
    print(f"Benchmark (worker logs: {args.log})", file=sys.stderr, flush=True)
    if not args.skip_throughput:
        raw = throughput(args, args.log)
        report["throughput"] = summarize_throughput(raw)
        report["throughput_raw"] = [
            {**r, "runs": [{k: v for k, v in run.items() if k != "token_ids"}
                           for run in r["runs"]]}
            for r in raw
        ]
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
