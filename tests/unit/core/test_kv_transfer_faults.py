"""P/D faults: how long a prefill instance holds KV for its decode side, how long the decode
side waits for a pull's answer, what kv_load_failure_policy does then, and the pair check
that the decode side gives up only after the prefill side stopped writing."""

from __future__ import annotations

from typing import Any

from ascend_core.deployment import KvTransferRole, KvTransferSettings
from ascend_core.deployment_builder import Requested, build_deployment
from ascend_core.env.mapping import MappingEnvironment
from ascend_core.errors import ConfigError
from ascend_core.kv_transfer import (
    MOONCAKE_V1,
    PULL_TIMEOUT_KEY,
    PairSide,
    check_pair,
    fault_bounds,
)
from ascend_core.plan import plan_config
from ascend_core.quantization import QuantMethod
from ports.device import ChipFamily, DeviceKind
from unit.core.plan_fixtures import dense_model, host

PRODUCER, CONSUMER = KvTransferRole.PRODUCER, KvTransferRole.CONSUMER


def kv(role: KvTransferRole, policy: str = "fail", **extra: Any) -> KvTransferSettings:
    return KvTransferSettings(
        connector=MOONCAKE_V1, role=role, extra=extra, load_failure_policy=policy
    )


def test_without_settings_the_bounds_are_vllms_and_say_what_happens() -> None:
    bounds = fault_bounds(kv(CONSUMER))
    assert (bounds.hold_s, bounds.pull_timeout_s, bounds.pull_timeout_set) == (480, 540.0, False)
    assert bounds.consumer_says() == (
        "a pull the prefill side leaves unanswered for 540 s (vLLM's "
        "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT + 60 s) ends as kv_load_failure_policy=fail "
        "says: the request ends with an error"
    )
    assert "480 s (VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT)" in bounds.producer_says()


def test_the_pull_deadline_key_and_the_hold_variable_set_the_bounds() -> None:
    settings = kv(CONSUMER, "recompute", **{PULL_TIMEOUT_KEY: "8"})
    deployment = build_deployment(
        dense_model(),
        DeviceKind.CPU,
        ChipFamily.HOST,
        Requested(kv_transfer_role=CONSUMER, kv_transfer=settings),
        MappingEnvironment({"VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT": "4"}),
        QuantMethod.NONE,
        None,
    )
    assert deployment.kv_transfer is not None
    bounds = fault_bounds(deployment.kv_transfer)
    assert (bounds.hold_s, bounds.pull_timeout_s, bounds.pull_timeout_set) == (4, 8.0, True)
    assert "unanswered for 8 s (kv_connector_extra_config.pull_timeout_s)" in (
        bounds.consumer_says()
    )
    assert bounds.consumer_says().endswith("the decode side computes the prompt itself")
    plan = plan_config(host(kv_transfer_role=CONSUMER, kv_transfer=settings))
    assert plan.errors == () and not any(PULL_TIMEOUT_KEY in w for w in plan.warnings)


def test_a_pull_deadline_that_is_not_a_positive_number_is_refused() -> None:
    for bad in (0, -3, "soon", True):
        plan = plan_config(
            host(kv_transfer_role=CONSUMER, kv_transfer=kv(CONSUMER, **{PULL_TIMEOUT_KEY: bad}))
        )
        (error,) = [e for e in plan.errors if isinstance(e, ConfigError)]
        assert f"pull_timeout_s={bad!r}" in error.what and "remove the key" in error.hint


def side(settings: KvTransferSettings, port: int) -> PairSide:
    return PairSide(host(kv_transfer_role=settings.role, kv_transfer=settings), 16, "auto", port)


def test_the_pair_says_both_sides_bounds_and_refuses_a_decode_that_gives_up_first() -> None:
    held = KvTransferSettings(connector=MOONCAKE_V1, role=PRODUCER, abort_timeout=30)
    ok = {c.name: c for c in check_pair(side(held, 1), side(kv(CONSUMER, pull_timeout_s=45), 2))}
    bounds = ok["fault bounds"]
    assert bounds.ok and "holds a finished request's KV blocks 30 s" in bounds.detail
    assert "unanswered for 45 s" in bounds.detail
    early = {
        c.name: c for c in check_pair(side(held, 1), side(kv(CONSUMER, pull_timeout_s=30), 2))
    }["fault bounds"]
    assert not early.ok and "may still write its KV (for 30 s)" in early.detail
    assert "pull_timeout_s above the prefill's VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT" in early.fix
