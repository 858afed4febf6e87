"""Benchmark (not a test): prefill/decode disaggregation against one instance, on the host.

    .venv/bin/python scripts/bench_pd.py [--style llama] [--size 87m] [--prompts 8] \
        [--prompt-words 400] [--new 32] [--json out.json]

Two setups, up at the same time:
- one aggregated `vllm serve` (the host device, fp32, eager), as the PD test starts its
  instances but without a KV connector;
- the PD setup of tests/e2e/test_pd_disaggregation.py (its `Pair`): a prefill and a
  decode `vllm serve` with MooncakeConnectorV1 over Mooncake's TCP transport on
  loopback, vllm-router in its vLLM PD mode in front.
Each prompt goes to one setup then the other (the order alternating), one request at a
time, streamed, greedy, EOS ignored, after one warm-up request each. Printed: TTFT
(request sent to first token) and TPOT (first to last token, per token after the first),
medians, and PD / aggregated; and the KV transfer rate:
- wire: the bytes the prefill side's Mooncake connector wrote and the time its transfer
  calls took (vLLM's own connector stats, the prefill instance's /metrics:
  vllm:mooncake_bytes_transferred, vllm:mooncake_xfer_time_seconds), bytes / time;
- decode side: the plugin's "KV received" log line per request (prompt tokens and the time
  from the request's admission to its blocks received), bytes / that time.
Both servers share this machine's CPUs with each other and with everything else running:
only ratios within one run mean anything. Nothing here runs on an Ascend NPU.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_REQUEST_SECONDS = 600

_RECEIVED = re.compile(
    r"KV received: request \S+, (\d+) prompt tokens' KV from prefill engine \S+ at \S+ "
    r"in ([0-9.]+) s\."
)
_WORDS = (
    "the plugin serves a model on the host device and moves its cache between two instances "
    "over a transfer engine while the router sends each request first to prefill then to "
    "decode blocks tokens layers heads attention"
)
_BYTES = "vllm:mooncake_bytes_transferred"
_SECONDS = "vllm:mooncake_xfer_time_seconds"


# -- arithmetic and parsing (unit-tested) ---------------------------------------------------


def metric_total(text: str, name: str) -> float:
    """The sum over every label set of one Prometheus sample name (e.g. `x_sum`) in text."""
    total = 0.0
    pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", re.M)
    for value in pattern.findall(text):
        total += float(value)
    return total


def transfer_totals(text: str) -> dict[str, float]:
    """The prefill side's Mooncake transfer counters: bytes, seconds and transfer calls."""
    return {
        "bytes": metric_total(text, f"{_BYTES}_sum"),
        "seconds": metric_total(text, f"{_SECONDS}_sum"),
        "transfers": metric_total(text, f"{_SECONDS}_count"),
    }


def received(log: str) -> list[tuple[int, float]]:
    """(prompt tokens, seconds) of each "KV received" line of the decode side's log."""
    return [(int(n), float(s)) for n, s in _RECEIVED.findall(log)]


def ttft_tpot(sent: float, token_times: Sequence[float], tokens: int) -> tuple[float, float]:
    """Seconds to the first token, and per output token after the first.

    token_times: when each streamed chunk carrying text arrived; tokens: the output tokens
    the server counted (a chunk may carry several)."""
    if not token_times or tokens < 1:
        raise ValueError("no token arrived")
    ttft = token_times[0] - sent
    tpot = (token_times[-1] - token_times[0]) / (tokens - 1) if tokens > 1 else 0.0
    return ttft, tpot


def gb_per_s(num_bytes: float, seconds: float) -> float:
    """Decimal GB/s (1e9 bytes); 0 when no time was spent."""
    return num_bytes / seconds / 1e9 if seconds > 0 else 0.0


def kv_bytes_per_token(config: Mapping[str, Any], dtype_bytes: int = 4) -> int:
    """K and V of every layer for one token, as the paged cache holds them (MHA/GQA)."""
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    return 2 * config["num_hidden_layers"] * kv_heads * head_dim * dtype_bytes


def summary(values: Iterable[float]) -> dict[str, float]:
    data = sorted(values)
    return {"median": statistics.median(data), "min": data[0], "max": data[-1]}


# -- the run ----------------------------------------------------------------------------------


def _prompts(count: int, words: int) -> list[str]:
    rng = random.Random(0)
    vocab = _WORDS.split()
    return [
        f"Request {i}: " + " ".join(rng.choice(vocab) for _ in range(words)) for i in range(count)
    ]


def _stream(url: str, model: str, prompt: str, new: int) -> dict[str, float]:
    import httpx

    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": new,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    times: list[float] = []
    usage: dict[str, int] = {}
    sent = time.perf_counter()
    with httpx.stream(
        "POST", f"{url}/v1/completions", json=body, timeout=_REQUEST_SECONDS
    ) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}: {response.read()[:300]!r}")
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line.removeprefix("data: "))
            if any(c.get("text") for c in chunk.get("choices") or ()):
                times.append(time.perf_counter())
            if chunk.get("usage"):
                usage = chunk["usage"]
    tokens = int(usage.get("completion_tokens") or len(times))
    ttft, tpot = ttft_tpot(sent, times, tokens)
    return {
        "ttft_s": ttft,
        "tpot_s": tpot,
        "prompt_tokens": int(usage.get("prompt_tokens") or 0),
        "output_tokens": tokens,
    }


def _metrics(url: str) -> str:
    import httpx

    return httpx.get(f"{url}/metrics", timeout=30).text


def _single_server(pd: Any, model: str, logs: Path) -> tuple[Any, str]:
    """One instance, started as the PD test starts its decode side, without a connector."""
    import os

    single = pd.Pair(model, logs)
    argv = single.serve_argv("kv_consumer")
    cut = argv.index("--kv-transfer-config")
    argv = argv[:cut] + argv[cut + 2 :]
    env = {**os.environ, "VLLM_ASCEND_DEVICE": "cpu", "VLLM_HOST_IP": "127.0.0.1"}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    return pd.Process(argv, logs / "aggregated.log", env), single.url["decode"]


def _run(
    pd: Any, model: str, logs: Path, prompts: list[str], new: int
) -> tuple[list[Any], list[Any], dict[str, float], list[tuple[int, float]]]:
    """Both setups up at once; each prompt goes to one then the other, the order alternating,
    so a change in the machine's load falls on both sides alike."""
    single, single_url = _single_server(pd, model, logs)
    pair = pd.Pair(model, logs)
    try:
        pair.start()
        single.wait_healthy(single_url, time.monotonic() + 600)
        urls = {"aggregated": single_url, "pd": pair.url["router"]}
        for url in urls.values():
            _stream(url, model, "Warm-up: " + prompts[0], new)
        time.sleep(2)  # the warm-up's transfer stats and log line land
        before = transfer_totals(_metrics(pair.url["prefill"]))
        seen = len(received(pair.procs["decode"].text()))
        runs: dict[str, list[Any]] = {"aggregated": [], "pd": []}
        for i, prompt in enumerate(prompts):
            for name in ("aggregated", "pd") if i % 2 == 0 else ("pd", "aggregated"):
                runs[name].append(_stream(urls[name], model, prompt, new))
        time.sleep(2)
        after = transfer_totals(_metrics(pair.url["prefill"]))
        delta = {k: after[k] - before[k] for k in after}
        pulls = received(pair.procs["decode"].text())[seen:]
        return runs["aggregated"], runs["pd"], delta, pulls
    finally:
        pair.stop()
        single.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--style", default="llama")
    parser.add_argument("--size", default="87m")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--prompt-words", type=int, default=400)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--json", type=Path, help="write the numbers here too")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT / "tests"))  # the PD test's Pair and Process
    sys.path.insert(0, str(ROOT / "scripts"))
    from make_models import make_model

    import e2e.test_pd_disaggregation as pd

    missing = pd._pd_packages_missing()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    model = str(make_model(ROOT / "models" / f"{args.size}-{args.style}", args.style, args.size))
    config = json.loads((Path(model) / "config.json").read_text())
    per_token = kv_bytes_per_token(config)
    prompts = _prompts(args.prompts, args.prompt_words)
    logs = Path(tempfile.mkdtemp(prefix="bench-pd-"))
    print(f"model {model}, {args.prompts} prompts, {args.new} new tokens; logs in {logs}")

    started = time.strftime("%H:%M:%S", time.gmtime())
    single, pd_runs, wire, pulls = _run(pd, model, logs, prompts, args.new)
    ended = time.strftime("%H:%M:%S", time.gmtime())

    result: dict[str, Any] = {
        "model": model,
        "utc": f"{started}-{ended}",
        "kv_bytes_per_token": per_token,
        "prompt_tokens": summary(r["prompt_tokens"] for r in single),
    }
    for name, runs in (("aggregated", single), ("pd", pd_runs)):
        result[name] = {k: summary(r[k] for r in runs) for k in ("ttft_s", "tpot_s")}
    pulled_tokens = sum(n for n, _ in pulls)
    pulled_seconds = sum(s for _, s in pulls)
    result["transfer"] = {
        "wire_bytes": wire["bytes"],
        "wire_seconds": wire["seconds"],
        "wire_transfers": wire["transfers"],
        "wire_gb_per_s": gb_per_s(wire["bytes"], wire["seconds"]),
        "received_requests": len(pulls),
        "received_tokens": pulled_tokens,
        "received_seconds_median": summary(s for _, s in pulls)["median"] if pulls else None,
        "received_gb_per_s": gb_per_s(pulled_tokens * per_token, pulled_seconds),
    }
    _print(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


def _print(r: dict[str, Any]) -> None:
    a, p, t = r["aggregated"], r["pd"], r["transfer"]
    print(
        f"\nprompt tokens (median) {r['prompt_tokens']['median']:.0f}, "
        f"KV {r['kv_bytes_per_token']} bytes per token"
    )
    print(f"{'':24}{'aggregated':>12}{'PD':>12}{'PD / aggr.':>12}")
    for key, label in (("ttft_s", "TTFT median, ms"), ("tpot_s", "TPOT median, ms")):
        x, y = a[key]["median"], p[key]["median"]
        print(f"{label:24}{x * 1e3:12.1f}{y * 1e3:12.1f}{y / x:12.2f}")
    print(
        f"KV transfer, wire (prefill connector's stats): {t['wire_bytes'] / 1e6:.1f} MB in "
        f"{t['wire_transfers']:.0f} transfers, {t['wire_seconds'] * 1e3:.1f} ms -> "
        f"{t['wire_gb_per_s']:.2f} GB/s"
    )
    if t["received_tokens"]:
        print(
            f"  {t['wire_bytes'] / t['received_tokens']:.0f} bytes on the wire per prompt token "
            "received (the connector sends whole blocks)"
        )
    if t["received_requests"]:
        print(
            "KV received, decode side (admission to blocks received): "
            f"{t['received_requests']} requests, {t['received_tokens']} tokens, median "
            f"{t['received_seconds_median'] * 1e3:.1f} ms -> {t['received_gb_per_s']:.3f} GB/s"
        )


if __name__ == "__main__":
    sys.exit(main())
