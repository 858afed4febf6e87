"""The Deployment builder hands the VLLM_ASCEND_* variables to the plan, so a bad value is
reported with every other problem, in one pass."""

from __future__ import annotations

from ascend_core.deployment_builder import Requested, build_deployment
from ascend_core.errors import ConfigError, EnvironmentVariableError
from ascend_core.plan import plan_config
from ascend_core.quantization import QuantMethod
from ports.device import ChipFamily, DeviceKind
from unit.core.plan_fixtures import dense_model
from unit.fakes.environment import FakeEnvironment


def test_a_bad_variable_and_a_bad_key_are_reported_together():
    env = FakeEnvironment({"VLLM_ASCEND_ENABLE_FLASHCOMM1": "maybe", "OTHER": "1"})
    requested = Requested(additional_config={"enable_kv_nzz": True})
    deployment = build_deployment(
        dense_model(), DeviceKind.NPU, ChipFamily.A2, requested, env, QuantMethod.NONE, None
    )
    assert dict(deployment.ascend_env) == {"VLLM_ASCEND_ENABLE_FLASHCOMM1": "maybe"}
    assert deployment.parallel.sequence_parallel is False  # built on the default meanwhile
    kinds = {type(e) for e in plan_config(deployment).errors}
    assert kinds == {EnvironmentVariableError, ConfigError}


def test_without_local_files_no_file_is_checked():
    requested = Requested(additional_config={"eplb_config": {"expert_map_path": "/m.json"}})
    deployment = build_deployment(
        dense_model(),
        DeviceKind.NPU,
        ChipFamily.A2,
        requested,
        FakeEnvironment(),
        QuantMethod.NONE,
        None,
    )
    assert dict(deployment.readable_files) == {}
