"""Variables other software defines that the plan reads (env_registry.OUTSIDE_VARS):
ASCEND_LAUNCH_BLOCKING (CANN) read through the registry, shown by the doctor's check."""

from __future__ import annotations

import pytest

from ascend_core.deployment_builder import Requested, build_deployment
from ascend_core.env_registry import (
    ENV_REGISTRY,
    LAUNCH_BLOCKING,
    OUTSIDE_REGISTRY,
    OUTSIDE_VARS,
    read_env,
    unknown_variables,
)
from ascend_core.errors import EnvironmentVariableError
from ascend_core.preflight.items import CheckStatus
from ascend_core.preflight.variables import registry_items
from ascend_core.quantization import QuantMethod
from ports.device import ChipFamily, DeviceKind
from unit.core.plan_fixtures import dense_model
from unit.fakes.environment import FakeEnvironment


def test_launch_blocking_is_registered_as_canns_own_variable() -> None:
    assert OUTSIDE_REGISTRY["ASCEND_LAUNCH_BLOCKING"] is LAUNCH_BLOCKING
    assert LAUNCH_BLOCKING.owner == "CANN"
    assert LAUNCH_BLOCKING.default == 0
    # Not one of this plugin's variables: not in its table, never called unknown.
    assert "ASCEND_LAUNCH_BLOCKING" not in ENV_REGISTRY
    assert all(v.owner is None for v in ENV_REGISTRY.values())
    assert not unknown_variables(FakeEnvironment({"ASCEND_LAUNCH_BLOCKING": "1"}))


@pytest.mark.parametrize(("raw", "value"), [("1", 1), (" 0 ", 0)])
def test_launch_blocking_reads_through_the_registry(raw: str, value: int) -> None:
    settings = read_env(FakeEnvironment({"ASCEND_LAUNCH_BLOCKING": raw}), OUTSIDE_VARS)
    assert settings.get(LAUNCH_BLOCKING) == value
    assert settings.is_set(LAUNCH_BLOCKING)


def test_a_value_cann_does_not_take_is_an_error_naming_it() -> None:
    with pytest.raises(EnvironmentVariableError, match="ASCEND_LAUNCH_BLOCKING='yes'"):
        read_env(FakeEnvironment({"ASCEND_LAUNCH_BLOCKING": "yes"}), OUTSIDE_VARS)


def _deployment(env: dict[str, str]) -> bool:
    deployment = build_deployment(
        dense_model(),
        DeviceKind.NPU,
        ChipFamily.A2,
        Requested(),
        FakeEnvironment(env),
        QuantMethod.NONE,
        host_cpus=4,
    )
    return deployment.launch_blocking


@pytest.mark.parametrize(
    ("env", "blocking"),
    [
        ({}, False),
        ({"ASCEND_LAUNCH_BLOCKING": "1"}, True),
        ({"ASCEND_LAUNCH_BLOCKING": "0"}, False),
        ({"ASCEND_LAUNCH_BLOCKING": "on"}, False),
    ],
)
def test_the_deployment_reads_launch_blocking_from_the_registry(
    env: dict[str, str], blocking: bool
) -> None:
    assert _deployment(env) is blocking


def test_the_doctors_check_shows_a_set_outside_variable_and_warns_on_a_bad_one() -> None:
    (item,) = [
        i
        for i in registry_items(FakeEnvironment({"ASCEND_LAUNCH_BLOCKING": "1"}))
        if i.name == "ASCEND_LAUNCH_BLOCKING"
    ]
    assert item.status is CheckStatus.PASS and "graph capture" in item.detail
    (bad,) = [
        i
        for i in registry_items(FakeEnvironment({"ASCEND_LAUNCH_BLOCKING": "on"}))
        if i.name == "ASCEND_LAUNCH_BLOCKING"
    ]
    assert bad.status is CheckStatus.WARN
    assert "CANN's variable" in bad.detail and "one of 0, 1" in bad.fix
    assert not [i for i in registry_items(FakeEnvironment()) if i.name == "ASCEND_LAUNCH_BLOCKING"]
