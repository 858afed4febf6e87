"""Prefill/decode faults on the host device, each in bounded time: a prefill instance that
stalls (SIGSTOP) or dies (SIGKILL) between its prefill and the decode side's pull, and a
decode instance that dies and restarts while the prefill side holds KV for it.

One pair and one router for the module (tests/e2e/test_pd_disaggregation.py's), with short
bounds: the prefill holds a finished request's KV HOLD_S seconds
(VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT), the decode side gives a pull up after PULL_S seconds
without an answer (kv_connector_extra_config.pull_timeout_s). A fault request is driven as
the router drives it (the prefill first, then the decode with the prefill's engine and
bootstrap address), so the fault can fall between the two steps. The tests run in order:
the last one kills the prefill instance.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from test_pd_disaggregation import (
    _REQUEST_SECONDS,
    Pair,
    Process,
    _complete,
    _free_port,
    _ids,
    _pd_packages_missing,
)

from support.hf_reference import local_model

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

HOLD_S = 4
PULL_S = 8.0
# What a fault may take on top of its bound: a step or two of a small engine on a busy host.
SLACK_S = 20.0


def _signal_tree(proc: Any, sig: int) -> None:
    """`sig` to a `vllm serve` and its engine processes (the KV lives in the engine's)."""
    import psutil

    try:
        family = [psutil.Process(proc.pid)]
        family += family[0].children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for member in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.send_signal(sig)


class FaultPair(Pair):
    """The module's pair with short fault bounds, whose decode instance can be restarted."""

    decode_policy = "recompute"
    # vLLM-router marks a worker unhealthy after 3 failed health checks and healthy again
    # after 2 good ones, 60 s apart by default: 2 s here, so it sees a restart soon.
    router_args = ("--health-check-interval-secs", "2")

    def serve_argv(self, role: str) -> list[str]:
        argv = super().serve_argv(role)
        at = argv.index("--kv-transfer-config") + 1
        kv = json.loads(argv[at])
        if role == "kv_consumer":
            kv["kv_load_failure_policy"] = self.decode_policy
            kv["kv_connector_extra_config"]["pull_timeout_s"] = PULL_S
        argv[at] = json.dumps(kv)
        return argv

    def restart_decode(self, policy: str) -> None:
        """SIGKILL the decode instance, start it again on its port with `policy`."""
        old = self.procs["decode"]
        _signal_tree(old.proc, signal.SIGKILL)
        old.proc.wait(timeout=30)
        old.stop()
        self.decode_policy = policy
        env = {
            **os.environ,
            "VLLM_ASCEND_DEVICE": self.device,
            "VLLM_HOST_IP": "127.0.0.1",
            "VLLM_MOONCAKE_BOOTSTRAP_PORT": str(_free_port()),
        }
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        self.procs["decode"] = Process(
            self.serve_argv("kv_consumer"), self.logs / "decode-restarted.log", env
        )

    def prefill_engine(self) -> str:
        """The prefill engine's id, from its bootstrap server (as the router learns it)."""
        import httpx

        entries = httpx.get(f"http://127.0.0.1:{self.bootstrap}/query", timeout=10).json()
        return str(next(iter(entries.values()))["engine_id"])


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultPair]:
    missing = _pd_packages_missing()
    if missing:
        pytest.skip(missing)
    running = FaultPair(str(local_model("llama", "tiny")), tmp_path_factory.mktemp("pd-faults"))
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT", str(HOLD_S))
            running.start()
        yield running
    finally:
        running.stop()


def _prefill_only(pair: FaultPair, prompt: str) -> dict[str, Any]:
    """The router's first step: the prefill instance computes the prompt and holds its KV;
    the returned parameters are those the router gives the decode instance."""
    transfer = f"fault-{uuid.uuid4().hex[:8]}"
    _complete(
        pair.url["prefill"],
        pair.model,
        prompt,
        n=1,
        kv_transfer_params={
            "do_remote_decode": True,
            "do_remote_prefill": False,
            "transfer_id": transfer,
        },
    )
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": pair.prefill_engine(),
        "remote_bootstrap_addr": f"http://127.0.0.1:{pair.bootstrap}",
        "transfer_id": transfer,
    }


def _decode(pair: FaultPair, prompt: str, params: dict[str, Any], timeout: float) -> Any:
    """The router's second step, timed: (response, seconds)."""
    import httpx

    body = {
        "model": pair.model,
        "prompt": prompt,
        "max_tokens": 10,
        "temperature": 0,
        "return_token_ids": True,
        "kv_transfer_params": params,
    }
    start = time.monotonic()
    try:
        r = httpx.post(f"{pair.url['decode']}/v1/completions", json=body, timeout=timeout)
    except httpx.TimeoutException:
        pytest.fail(f"the decode request hung past {timeout:g} s")
    return r, time.monotonic() - start


def _wait_for(log: Process, pattern: str, seconds: float) -> re.Match[str]:
    deadline = time.monotonic() + seconds
    while True:
        found = re.search(pattern, log.text())
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"no {pattern!r} in {seconds:g} s:\n{log.text()[-3000:]}")
        time.sleep(0.5)


def _kv_usage(url: str) -> float:
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=30).text
    found = re.search(r"^vllm:kv_cache_usage_perc\{[^}]*\} (\S+)$", text, re.M)
    assert found, "no vllm:kv_cache_usage_perc in /metrics"
    return float(found.group(1))


def _wait_kv_freed(url: str, seconds: float) -> float:
    deadline = time.monotonic() + seconds
    while (usage := _kv_usage(url)) > 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    return usage


def _routed_ids(pair: FaultPair, prompt: str, within: float = 60) -> list[int]:
    """Ids through the router, retried while it notices a peer is back (its health checks)."""
    import httpx

    body = {"model": pair.model, "prompt": prompt, "max_tokens": 10, "temperature": 0}
    deadline = time.monotonic() + within
    while True:
        r = httpx.post(
            f"{pair.url['router']}/v1/completions",
            json={**body, "return_token_ids": True},
            timeout=_REQUEST_SECONDS,
        )
        if r.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert r.status_code == 200, r.text[:300]
    return _ids(r.json())


PROMPT = "A fault between prefill and decode: the decode side reads " + "blocks " * 12


def test_a_stalled_prefill_is_given_up_in_bound_recomputed_and_writes_nothing_late(
    pair: FaultPair,
) -> None:
    alone = _ids(_complete(pair.url["decode"], pair.model, PROMPT))
    # The decode side knows the prefill engine (a routed request), as in service.
    assert _ids(_complete(pair.url["router"], pair.model, PROMPT)) == alone
    params = _prefill_only(pair, PROMPT)
    prefill = pair.procs["prefill"].proc
    _signal_tree(prefill, signal.SIGSTOP)
    try:
        # The others finish while the faulted pull waits.
        with ThreadPoolExecutor(4) as pool:
            faulted = pool.submit(_decode, pair, PROMPT, params, PULL_S + SLACK_S + 30)
            others = [
                pool.submit(_complete, pair.url["decode"], pair.model, f"Bystander {i}")
                for i in range(3)
            ]
            start = time.monotonic()
            for other in others:
                other.result(timeout=_REQUEST_SECONDS)
            assert time.monotonic() - start < PULL_S, "the others waited for the faulted pull"
            r, took = faulted.result()
    finally:
        _signal_tree(prefill, signal.SIGCONT)
    assert r.status_code == 200, r.text[:300]
    assert _ids(r.json()) == alone  # recomputed on the decode side, the same ids
    assert PULL_S <= took < PULL_S + SLACK_S
    decode_log = pair.procs["decode"]
    _wait_for(
        decode_log,
        rf"KV load failed: request \S+, \d+ prompt tokens' KV from prefill engine "
        rf"{params['remote_engine_id']} .*pull deadline {PULL_S:g} s\); "
        r"kv_load_failure_policy=recompute",
        5,
    )
    # Resumed, the prefill side writes nothing into blocks the decode side gave up: the
    # request is past its hold, so it is refused (if the pull is read first) or expired.
    _wait_for(
        pair.procs["prefill"],
        r"KV not sent: requests .* held past \d+ s|timed out after \d+ seconds without being "
        r"sent\. Freeing its blocks",
        SLACK_S,
    )
    assert _wait_kv_freed(pair.url["prefill"], SLACK_S) == 0.0
    # Both stay healthy: a routed request gives the ids again.
    assert _routed_ids(pair, PROMPT) == alone


def test_a_decode_restart_frees_the_prefill_blocks_and_the_router_recovers(
    pair: FaultPair,
) -> None:
    alone = _ids(_complete(pair.url["decode"], pair.model, PROMPT))
    # The prefill side holds KV for a decode instance that then dies before its pull.
    _prefill_only(pair, PROMPT)
    assert _kv_usage(pair.url["prefill"]) > 0
    start = time.monotonic()
    pair.restart_decode("fail")
    # The prefill side frees the blocks after its hold, decode gone or not.
    _wait_for(
        pair.procs["prefill"],
        rf"timed out after {HOLD_S} seconds without being sent\. Freeing its blocks",
        HOLD_S + SLACK_S,
    )
    assert _wait_kv_freed(pair.url["prefill"], SLACK_S) == 0.0
    assert time.monotonic() - start < HOLD_S + SLACK_S
    pair.procs["decode"].wait_healthy(pair.url["decode"], time.monotonic() + 600)
    # The router reaches the restarted decode instance; the ids are the single instance's.
    assert _routed_ids(pair, PROMPT) == alone


# Last in the module: it kills the prefill instance.
def test_a_dead_prefill_ends_the_request_with_a_clear_error_in_bound(pair: FaultPair) -> None:
    # The decode instance now runs kv_load_failure_policy=fail (restarted so above).
    alone = _ids(_complete(pair.url["decode"], pair.model, PROMPT))
    assert _ids(_complete(pair.url["router"], pair.model, PROMPT)) == alone
    params = _prefill_only(pair, PROMPT)
    prefill = pair.procs["prefill"].proc
    _signal_tree(prefill, signal.SIGKILL)
    prefill.wait(timeout=30)
    r, took = _decode(pair, PROMPT, params, PULL_S + SLACK_S + 30)
    assert took < PULL_S + SLACK_S
    # Not silently wrong: an error status, or a choice that says it ended in error.
    if r.status_code == 200:
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] not in ("stop", "length"), choice
    else:
        assert r.status_code >= 400, r.text[:300]
        assert "error" in r.text.lower(), r.text[:300]
    _wait_for(
        pair.procs["decode"],
        r"KV load failed: request \S+, \d+ prompt tokens' KV from prefill engine "
        rf"{params['remote_engine_id']} .*kv_load_failure_policy=fail "
        r"\(the request ends with an error\)",
        5,
    )
    # The decode instance is healthy and answers a fresh request as before.
    import httpx

    assert httpx.get(f"{pair.url['decode']}/health", timeout=10).status_code == 200
    assert _ids(_complete(pair.url["decode"], pair.model, PROMPT)) == alone
