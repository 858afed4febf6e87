"""Requests between a router and a Mooncake P/D pair: the vllm-router command that matches
a pair, and what a decode instance says when a request comes without Mooncake's transfer
parameters (it then computes the whole prompt itself)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from ascend_core.kv_transfer import DEFAULT_BOOTSTRAP_PORT, PairSide

# `vllm serve`'s HTTP port when --port is not given.
DEFAULT_HTTP_PORT = 8000
FIRST_ROUTER_PORT = 8100
# The keys vLLM's MooncakeConnector needs on a decode instance to pull a prompt's KV
# (MooncakeConnectorScheduler.update_state_after_alloc); the router adds them.
PULL_KEYS = ("remote_engine_id", "remote_bootstrap_addr", "transfer_id")
WILDCARD_HOSTS = ("", "0.0.0.0", "::")
ROUTER_FIX = (
    "start vllm-router in its vLLM PD mode with the Mooncake connector and the prefill's "
    "bootstrap port after its URL: vllm-router --vllm-pd-disaggregation --kv-connector "
    "mooncake --prefill http://PREFILL_HOST:PORT BOOTSTRAP_PORT --decode "
    "http://DECODE_HOST:PORT (`ascend-doctor pair` prints the line for your pair)"
)


def _address(side: PairSide) -> str:
    host = "127.0.0.1" if side.host in WILDCARD_HOSTS else side.host
    if ":" in host:  # an IPv6 literal in a URL
        host = f"[{host}]"
    return f"http://{host}:{side.http_port or DEFAULT_HTTP_PORT}"


def router_command(prefill: PairSide, decode: PairSide) -> tuple[str, ...]:
    """The vllm-router argv (as the project starts it: tests/e2e/test_pd_disaggregation.py)
    that sends each request to this pair with Mooncake's transfer parameters: the vLLM PD
    mode, `--kv-connector mooncake`, and the prefill's bootstrap port after its URL. The
    router listens on loopback at the first port from 8100 that neither instance uses."""
    kv = prefill.deployment.kv_transfer
    bootstrap = (kv.bootstrap_port if kv is not None else None) or DEFAULT_BOOTSTRAP_PORT
    taken = {prefill.http_port or DEFAULT_HTTP_PORT, decode.http_port or DEFAULT_HTTP_PORT}
    taken.add(bootstrap)
    port = FIRST_ROUTER_PORT
    while port in taken:
        port += 1
    return (
        "vllm-router",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--vllm-pd-disaggregation",
        "--kv-connector",
        "mooncake",
        "--prefill",
        _address(prefill),
        str(bootstrap),
        "--decode",
        _address(decode),
    )


def router_command_line(prefill: PairSide, decode: PairSide) -> str:
    """`router_command` as one shell line."""
    return shlex.join(router_command(prefill, decode))


def missing_transfer_params(params: Mapping[str, Any] | None) -> str | None:
    """What a request reaching a decode instance lacks for its prompt's KV to be pulled from
    the prefill instance; None when it has what vLLM's MooncakeConnector needs, or when it
    is a request whose pull already happened (vLLM sets do_remote_prefill to false then)."""
    if not params:
        return "it carries no kv_transfer_params"
    if "do_remote_prefill" not in params:
        return f"its kv_transfer_params ({', '.join(sorted(map(str, params)))}) ask for no pull"
    if not params.get("do_remote_prefill"):
        return None
    missing = [key for key in PULL_KEYS if key not in params]
    if missing:
        return f"its kv_transfer_params lack {', '.join(missing)}"
    return None


def no_pull_warning(request_id: str, what: str) -> str:
    """The decode instance's warning, said once: what came, what it costs, the likely
    cause and the fix."""
    return (
        f"P/D: request {request_id} reached this decode instance (kv_consumer) without "
        f"Mooncake's transfer parameters: {what}. It computes the whole prompt itself and "
        "no KV comes from the prefill instance (said once; later such requests are not "
        "logged). Likely cause: the router in front was started without `--kv-connector "
        "mooncake` or without the prefill's bootstrap port after its URL, or the request "
        f"was sent to this instance directly. Fix: {ROUTER_FIX}."
    )
