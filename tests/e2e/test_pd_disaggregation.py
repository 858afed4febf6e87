"""Prefill/decode disaggregation on the host device: one prefill and one decode `vllm serve`
on loopback, KV moved by the Mooncake transfer engine over TCP, vllm-router in its vLLM PD
mode in front (the `pd` extra: mooncake-transfer-engine-non-cuda, vllm-router).

One pair and one router for the module. Completions (plain, concurrent, streamed) and chat
through the router give the ids the decode instance gives alone; the decode side logs, per
request, how many prompt tokens' KV it received and from which prefill engine, and vLLM's
counters say those tokens came by KV transfer, not computed again.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from support.hf_reference import local_model

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

_REPO = Path(__file__).resolve().parents[2]
_VENV_BIN = Path(sys.executable).parent
# The reference's keys; TCP is the host's default transport, and on the emulated NPU
# (whose `npu` tensors are host memory) it is asked for, the NPU's default being Ascend's.
_SIZES = '"prefill": {"dp_size": 1, "tp_size": 1}, "decode": {"dp_size": 1, "tp_size": 1}'
_READY_SECONDS = 900  # two engines starting side by side on a small shared host (a hang guard)
_REQUEST_SECONDS = 120


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@functools.cache
def _pd_packages_missing() -> str | None:
    """Why the pd extra cannot run here (None when it can): imported in a child, as the
    servers will import it (mooncake's engine needs libibverbs.so.1 even for TCP)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import mooncake.engine, vllm_router.launch_router"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if probe.returncode == 0:
        return None
    last = (probe.stderr.strip().splitlines() or ["?"])[-1]
    return (
        f"the pd extra is not importable ({last}); install it with "
        "`pip install -e '.[pd]'` (and `apt-get install libibverbs1`)"
    )


class Process:
    """A child with its log, stopped with SIGTERM (then SIGKILL) at the end."""

    def __init__(self, argv: list[str], log_path: Path, env: dict[str, str]) -> None:
        self.log_path = log_path
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv, env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=_REPO
        )

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_healthy(self, url: str, deadline: float) -> None:
        import httpx

        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.log_path.name} exited early:\n{self.text()[-4000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(2)
        raise TimeoutError(f"{self.log_path.name} not ready:\n{self.text()[-4000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Pair:
    """The prefill and decode instances and the router in front of them."""

    router_args: tuple[str, ...] = ()  # more vllm-router options (the fault tests' own)

    def __init__(self, model: str, logs: Path, device: str = "cpu") -> None:
        self.model = model
        self.device = device
        self.ports = {"prefill": _free_port(), "decode": _free_port(), "router": _free_port()}
        self.bootstrap = _free_port()
        self.url = {k: f"http://127.0.0.1:{p}" for k, p in self.ports.items()}
        self.logs = logs
        self.procs: dict[str, Process] = {}

    def serve_argv(self, role: str) -> list[str]:
        extra = _SIZES + (', "mooncake_protocol": "tcp"' if self.device == "npu" else "")
        # The decode side recomputes what it could not load (vLLM's policy; default fail).
        policy = "recompute" if role == "kv_consumer" else "fail"
        kv = (
            f'{{"kv_connector": "MooncakeConnectorV1", "kv_role": "{role}", '
            f'"kv_load_failure_policy": "{policy}", '
            f'"kv_connector_extra_config": {{{extra}}}}}'
        )
        side = "prefill" if role == "kv_producer" else "decode"
        prefix: list[str] = []
        # The NPU attention op takes fp16/bf16 only, and paged prefill 128-token blocks.
        dtype, block = (
            ("float32", []) if self.device == "cpu" else ("bfloat16", ["--block-size", "128"])
        )
        if self.device == "npu":
            prefix = [sys.executable, str(_REPO / "scripts" / "emulated_npu.py"), "--"]
        return [
            *prefix,
            str(_VENV_BIN / "vllm"),
            "serve",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.ports[side]),
            "--dtype",
            dtype,
            *block,
            "--enforce-eager",
            "--max-model-len",
            "1024",
            "--kv-cache-memory-bytes",
            str(128 << 20),
            "--max-num-seqs",
            "16",
            "--shutdown-timeout",
            "10",
            "--kv-transfer-config",
            kv,
        ]

    def start(self) -> None:
        env = {**os.environ, "VLLM_ASCEND_DEVICE": self.device, "VLLM_HOST_IP": "127.0.0.1"}
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        deadline = time.monotonic() + _READY_SECONDS
        for side, role in (("prefill", "kv_producer"), ("decode", "kv_consumer")):
            side_env = {**env, "VLLM_MOONCAKE_BOOTSTRAP_PORT": str(self.bootstrap)}
            if side == "decode":  # a consumer starts no bootstrap server; keep ports apart
                side_env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] = str(_free_port())
            self.procs[side] = Process(self.serve_argv(role), self.logs / f"{side}.log", side_env)
        for side in ("prefill", "decode"):
            self.procs[side].wait_healthy(self.url[side], deadline)
        router = [
            sys.executable,
            "-m",
            "vllm_router.launch_router",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.ports["router"]),
            "--vllm-pd-disaggregation",
            "--kv-connector",
            "mooncake",
            "--prefill",
            self.url["prefill"],
            str(self.bootstrap),
            "--decode",
            self.url["decode"],
            "--request-timeout-secs",
            str(_REQUEST_SECONDS),
            *self.router_args,
        ]
        self.procs["router"] = Process(router, self.logs / "router.log", env)
        self.procs["router"].wait_healthy(self.url["router"], deadline)

    def stop(self) -> None:
        for side in ("router", "decode", "prefill"):
            if side in self.procs:
                self.procs[side].stop()


def running_pair(tmp_path_factory: pytest.TempPathFactory, device: str) -> Iterator[Pair]:
    """A started pair and router of the tiny Llama-style model (GQA) on `device`."""
    missing = _pd_packages_missing()
    if missing:
        pytest.skip(missing)
    model = str(local_model("llama", "tiny"))
    running = Pair(model, tmp_path_factory.mktemp(f"pd-{device}"), device)
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from running_pair(tmp_path_factory, "cpu")


def _complete(url: str, model: str, prompt: str, n: int = 10, **extra: Any) -> dict[str, Any]:
    import httpx

    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": n,
        "temperature": 0,
        "return_token_ids": True,
        **extra,
    }
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=_REQUEST_SECONDS)
    assert r.status_code == 200, r.text[:500]
    return dict(r.json())


def _ids(response: dict[str, Any]) -> list[int]:
    return list(response["choices"][0]["token_ids"])


def _prompt_tokens_by_source(url: str) -> dict[str, float]:
    """vLLM's prompt-token counters of an instance, by where the tokens' KV came from."""
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=30).text
    found = re.findall(
        r'^vllm:prompt_tokens_by_source_total\{[^}]*source="(\w+)"[^}]*\} (\S+)$', text, re.M
    )
    totals = {"local_compute": 0.0, "external_kv_transfer": 0.0, "local_cache_hit": 0.0}
    for source, value in found:
        totals[source] = totals.get(source, 0.0) + float(value)
    return totals


_RECEIVED = re.compile(r"KV received: request \S+, (\d+) prompt tokens' KV from prefill engine")


def _routed_as_alone(pair: Pair, prompts: list[str], alone: list[list[int]]) -> list[int]:
    """Send `prompts` through the router at once: their ids are `alone`, the decode side
    logged each request's prompt KV as received and computed at most the last prompt token
    of each. Returns the prompt lengths, sorted."""
    before = len(_RECEIVED.findall(pair.procs["decode"].text()))
    sources = _prompt_tokens_by_source(pair.url["decode"])
    start = time.monotonic()
    with ThreadPoolExecutor(len(prompts)) as pool:
        routed = list(pool.map(lambda p: _complete(pair.url["router"], pair.model, p), prompts))
    assert time.monotonic() - start < _REQUEST_SECONDS
    assert [_ids(r) for r in routed] == alone
    # The decode side logged each request's received KV: as many tokens as the prompt.
    time.sleep(1)  # the engine's log line may trail the HTTP answer
    received = _RECEIVED.findall(pair.procs["decode"].text())[before:]
    prompt_lengths = sorted(r["usage"]["prompt_tokens"] for r in routed)
    assert sorted(int(n) for n in received) == prompt_lengths
    # And it computed none of them again: vLLM counts them as come by KV transfer, and at
    # most the last prompt token of each request as computed on the decode side.
    after = _prompt_tokens_by_source(pair.url["decode"])
    computed = after["local_compute"] - sources["local_compute"]
    transferred = after["external_kv_transfer"] - sources["external_kv_transfer"]
    assert transferred >= sum(prompt_lengths) - len(prompts)
    assert computed <= len(prompts)
    return prompt_lengths


def test_concurrent_completions_through_the_router_match_one_instance(pair: Pair) -> None:
    prompts = [f"Request {i}: the decode side reads " + "blocks " * (i * 3) for i in range(8)]
    alone = [_ids(_complete(pair.url["decode"], pair.model, p)) for p in prompts]
    _routed_as_alone(pair, prompts, alone)


def test_streaming_and_chat_through_the_router(pair: Pair) -> None:
    import httpx

    prompt = "Streaming across two instances"
    whole = _complete(pair.url["router"], pair.model, prompt)
    body = {"model": pair.model, "prompt": prompt, "max_tokens": 10, "temperature": 0}
    pieces = []
    with httpx.stream(
        "POST",
        f"{pair.url['router']}/v1/completions",
        json={**body, "stream": True},
        timeout=_REQUEST_SECONDS,
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                import json

                chunk = json.loads(line.removeprefix("data: "))
                pieces += [c["text"] for c in chunk.get("choices", [])]
    assert len(pieces) > 1 and "".join(pieces) == whole["choices"][0]["text"]

    chat = {
        "model": pair.model,
        "messages": [{"role": "user", "content": "Say something about ports."}],
        "max_tokens": 8,
        "temperature": 0,
    }
    routed = httpx.post(f"{pair.url['router']}/v1/chat/completions", json=chat, timeout=60)
    alone = httpx.post(f"{pair.url['decode']}/v1/chat/completions", json=chat, timeout=60)
    assert routed.status_code == alone.status_code == 200, routed.text[:300]
    content = routed.json()["choices"][0]["message"]["content"]
    assert content and content == alone.json()["choices"][0]["message"]["content"]


# Last in the module: it kills the prefill instance.
_FAULT_SECONDS = 60  # the bound a request may take once its prefill side is gone


def test_a_dead_prefill_instance_ends_requests_in_bounded_time_and_decode_survives(
    pair: Pair,
) -> None:
    import httpx

    prompt = "Where did the prefill go"
    alone = _ids(_complete(pair.url["decode"], pair.model, prompt))
    # The engine and bootstrap address the router learnt (the decode's pulls go there).
    prefill = pair.procs["prefill"].proc
    prefill.send_signal(signal.SIGKILL)
    prefill.wait(timeout=30)
    # 1. Through the router: the prefill step fails, the client gets an error status.
    start = time.monotonic()
    r = httpx.post(
        f"{pair.url['router']}/v1/completions",
        json={"model": pair.model, "prompt": prompt, "max_tokens": 10, "temperature": 0},
        timeout=_FAULT_SECONDS + 30,
    )
    assert r.status_code >= 500, r.text[:300]
    assert time.monotonic() - start < _FAULT_SECONDS
    # 2. A decode request whose KV lives on the dead instance (as if it died between its
    # prefill and the pull): with kv_load_failure_policy=recompute the decode side computes
    # the prompt itself, in bound, and answers as it does alone.
    params = {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": "dead-prefill",
        "remote_bootstrap_addr": f"http://127.0.0.1:{pair.bootstrap}",
        "transfer_id": "fault-test",
    }
    start = time.monotonic()
    try:
        r = httpx.post(
            f"{pair.url['decode']}/v1/completions",
            json={
                "model": pair.model,
                "prompt": prompt,
                "max_tokens": 10,
                "temperature": 0,
                "return_token_ids": True,
                "kv_transfer_params": params,
            },
            timeout=_FAULT_SECONDS,
        )
    except httpx.TimeoutException:
        pytest.fail(f"the decode request hung past {_FAULT_SECONDS} s with its prefill dead")
    took = time.monotonic() - start
    assert r.status_code == 200, r.text[:300]
    assert _ids(r.json()) == alone
    assert took < _FAULT_SECONDS
    time.sleep(1)  # the engine's log line may trail the HTTP answer
    log = pair.procs["decode"].text()
    assert re.search(
        r"KV load failed: request \S+, \d+ prompt tokens' KV from prefill engine "
        r"dead-prefill .* kv_load_failure_policy=recompute",
        log,
    ), log[-3000:]
    assert not re.search(
        r"KV received: request \S+, \d+ prompt tokens' KV from prefill "
        r"engine dead-prefill",
        log,
    )
    # 3. The decode instance is healthy and answers as before.
    assert httpx.get(f"{pair.url['decode']}/health", timeout=10).status_code == 200
    assert _ids(_complete(pair.url["decode"], pair.model, prompt)) == alone
