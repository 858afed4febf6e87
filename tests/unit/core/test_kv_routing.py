"""ascend_core.kv_routing: the vllm-router line for a P/D pair, and which requests a
decode instance gets without Mooncake's transfer parameters."""

from __future__ import annotations

import pytest

from ascend_core.deployment import KvTransferRole, KvTransferSettings
from ascend_core.kv_routing import (
    missing_transfer_params,
    no_pull_warning,
    router_command,
    router_command_line,
)
from ascend_core.kv_transfer import PairSide
from unit.core.plan_fixtures import host


def _side(
    role: KvTransferRole, port: int | None, bootstrap: int | None = None, **kw: object
) -> PairSide:
    kv = KvTransferSettings(role=role, connector="MooncakeConnectorV1", bootstrap_port=bootstrap)
    return PairSide(host(kv_transfer=kv, kv_transfer_role=role), 128, "float32", port, **kw)  # type: ignore[arg-type]


def test_the_router_line_matches_the_pair_as_the_e2e_run_starts_it() -> None:
    """tests/e2e/test_pd_disaggregation.py: --vllm-pd-disaggregation --kv-connector mooncake
    --prefill URL BOOTSTRAP --decode URL."""
    prefill = _side(KvTransferRole.PRODUCER, 8101, 8998)
    decode = _side(KvTransferRole.CONSUMER, 8102)
    argv = router_command(prefill, decode)
    assert argv[0] == "vllm-router"
    assert argv[argv.index("--kv-connector") + 1] == "mooncake"
    assert "--vllm-pd-disaggregation" in argv
    i = argv.index("--prefill")
    assert argv[i + 1 : i + 3] == ("http://127.0.0.1:8101", "8998")
    assert argv[argv.index("--decode") + 1] == "http://127.0.0.1:8102"
    assert argv[argv.index("--port") + 1] == "8100"
    assert router_command_line(prefill, decode).startswith("vllm-router --host 127.0.0.1")


def test_the_router_takes_vllms_defaults_and_a_port_nobody_uses() -> None:
    prefill = _side(KvTransferRole.PRODUCER, 8100, host="0.0.0.0")
    decode = _side(KvTransferRole.CONSUMER, None, host="10.0.0.2")
    argv = router_command(prefill, decode)
    i = argv.index("--prefill")
    assert argv[i + 1 : i + 3] == ("http://127.0.0.1:8100", "8998")  # vLLM's bootstrap
    assert argv[argv.index("--decode") + 1] == "http://10.0.0.2:8000"  # vLLM's --port
    assert argv[argv.index("--port") + 1] == "8101"


@pytest.mark.parametrize(
    ("params", "missing"),
    [
        (None, "no kv_transfer_params"),
        ({}, "no kv_transfer_params"),
        ({"other": 1}, "ask for no pull"),
        ({"do_remote_prefill": True, "remote_engine_id": "e"}, "remote_bootstrap_addr"),
    ],
)
def test_requests_without_what_a_pull_needs_are_named(params: dict | None, missing: str) -> None:
    what = missing_transfer_params(params)
    assert what is not None and missing in what
    assert missing in no_pull_warning("r", what)


@pytest.mark.parametrize(
    "params",
    [
        {
            "do_remote_prefill": True,
            "remote_engine_id": "e",
            "remote_bootstrap_addr": "a",
            "transfer_id": "t",
        },
        {"do_remote_prefill": False},  # vLLM's mark after the one pull (a resumed request)
    ],
)
def test_a_routed_or_already_pulled_request_is_fine(params: dict) -> None:
    assert missing_transfer_params(params) is None


def test_the_warning_names_the_cause_and_the_fix() -> None:
    said = no_pull_warning("r1", "it carries no kv_transfer_params")
    assert "computes the whole prompt itself" in said
    assert "--kv-connector mooncake" in said and "bootstrap port after its URL" in said
    assert "ascend-doctor pair" in said
