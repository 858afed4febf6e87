"""Plan steps: worker kind, and context parallelism against KV transfer."""

from __future__ import annotations

import attrs

from ascend_core.deployment import KvTransferRole
from ascend_core.errors import ConfigError, DeviceUnavailableError
from ascend_core.plan import WorkerKind, plan_config
from ports.device import ChipFamily
from unit.core.plan_fixtures import dense_model, host, mla_model, npu, step_errors


def test_npu_gets_the_npu_worker_and_host_the_host_worker() -> None:
    assert plan_config(npu()).worker_kind is WorkerKind.NPU
    assert plan_config(host()).worker_kind is WorkerKind.HOST


def test_npu_kind_without_an_ascend_chip_is_an_error_with_a_hint() -> None:
    (error,) = plan_config(npu(chip=ChipFamily.HOST)).errors
    assert isinstance(error, DeviceUnavailableError)
    assert "chip family is host" in error.what
    assert "VLLM_ASCEND_DEVICE=cpu" in error.hint


def test_dcp_with_kv_transfer_on_a_non_mla_model_is_an_error() -> None:
    deployment = npu(
        dense_model(), parallel={"tp": 4, "dcp": 2}, kv_transfer_role=KvTransferRole.CONSUMER
    )
    (error,) = plan_config(deployment).errors
    assert isinstance(error, ConfigError)
    assert "decode_context_parallel_size=2" in error.what
    assert "kv_role=kv_consumer" in error.what
    assert "Qwen3ForCausalLM" in error.what
    assert "decode_context_parallel_size=1" in error.hint


def test_dcp_with_kv_transfer_on_an_mla_model_is_fine() -> None:
    deployment = npu(
        mla_model(), parallel={"tp": 4, "dcp": 4}, kv_transfer_role=KvTransferRole.CONSUMER
    )
    assert not step_errors(plan_config(deployment))


def test_dcp_on_a_producer_is_a_warning() -> None:
    deployment = npu(
        mla_model(), parallel={"tp": 4, "dcp": 2}, kv_transfer_role=KvTransferRole.PRODUCER
    )
    plan = plan_config(deployment)
    assert not step_errors(plan)
    assert any("KV producer" in w for w in plan.warnings)


def test_pcp_on_a_consumer_is_a_warning() -> None:
    deployment = npu(parallel={"tp": 2, "pcp": 2}, kv_transfer_role=KvTransferRole.CONSUMER)
    plan = plan_config(deployment)
    assert plan.ok
    assert any("KV consumer" in w for w in plan.warnings)


def test_context_parallel_without_kv_transfer_says_nothing_about_it() -> None:
    plan = plan_config(npu(dense_model(), parallel={"tp": 4, "dcp": 2, "pcp": 1}))
    assert plan.ok
    assert not any("KV" in w for w in plan.warnings)
    both = attrs.evolve(npu(parallel={"tp": 2}), kv_transfer_role=KvTransferRole.BOTH)
    assert plan_config(both).ok
