"""KV connectors of P/D disaggregation: names, transports and options on one instance (the
plan), and what a prefill and a decode instance must agree on (the pair check)."""

from __future__ import annotations

from typing import Any

import pytest

from ascend_core.deployment import Deployment, KvTransferRole, KvTransferSettings
from ascend_core.deployment_builder import Requested, build_deployment
from ascend_core.env.mapping import MappingEnvironment
from ascend_core.errors import ConfigError
from ascend_core.kv_transfer import (
    MOONCAKE,
    MOONCAKE_V1,
    MOONCAKE_V1_MODULE,
    PairSide,
    Transport,
    check_pair,
    settings_from,
    transport,
)
from ascend_core.plan import fields, plan_config
from ascend_core.quantization import QuantMethod
from ports.device import ChipFamily, DeviceKind
from unit.core.plan_fixtures import dense_model, dsa_model, host, mla_model, npu

PRODUCER, CONSUMER = KvTransferRole.PRODUCER, KvTransferRole.CONSUMER
SIZES = {"prefill": {"dp_size": 1, "tp_size": 1}, "decode": {"dp_size": 1, "tp_size": 1}}


def kv(
    role: KvTransferRole = PRODUCER, connector: str = MOONCAKE_V1, **extra: Any
) -> KvTransferSettings:
    return KvTransferSettings(connector=connector, role=role, extra=extra)


def on_host(settings: KvTransferSettings, **kwargs: Any) -> Deployment:
    return host(kv_transfer_role=settings.role, kv_transfer=settings, **kwargs)


def errors(deployment: Deployment) -> list[ConfigError]:
    return [e for e in plan_config(deployment).errors if isinstance(e, ConfigError)]


def test_an_unknown_connector_is_refused_with_the_known_names() -> None:
    (error,) = errors(on_host(kv(connector="NixlConnector")))
    assert "kv_connector='NixlConnector'" in error.what
    assert f"known: {MOONCAKE}, {MOONCAKE_V1}" in error.what
    assert MOONCAKE_V1 in error.hint


def test_the_reference_name_on_the_host_plans_our_module_and_tcp() -> None:
    settings = kv(**SIZES)
    plan = plan_config(on_host(settings))
    assert plan.errors == ()
    (change,) = plan.changes_to(fields.KV_CONNECTOR_MODULE)
    assert change.new == MOONCAKE_V1_MODULE and "reference" in change.reason
    assert transport(settings, DeviceKind.CPU) is Transport.TCP
    assert transport(settings, DeviceKind.NPU) is Transport.ASCEND
    assert transport(kv(use_ascend_direct=True), DeviceKind.NPU) is Transport.ASCEND


def test_vllms_name_keeps_vllms_rdma_default_which_the_host_refuses() -> None:
    (error,) = errors(on_host(kv(connector=MOONCAKE)))
    assert "RDMA" in error.what and '"mooncake_protocol": "tcp"' in error.hint
    ok = plan_config(on_host(kv(connector=MOONCAKE, mooncake_protocol="tcp")))
    assert ok.errors == () and ok.changes_to(fields.KV_CONNECTOR_MODULE) == ()


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"use_ascend_direct": True}, "Ascend's transport"),
        ({"mooncake_protocol": "carrier-pigeon"}, "mooncake_protocol='carrier-pigeon'"),
        ({"use_layerwise": True}, "use_layerwise"),
        ({"prefill": {"tp_size": 2}}, "prefill.tp_size=2"),
    ],
)
def test_options_the_host_instance_cannot_honour_are_errors(
    extra: dict[str, Any], needle: str
) -> None:
    (error,) = errors(on_host(kv(**extra)))
    assert needle in error.what and error.hint


def test_the_reference_module_path_is_refused() -> None:
    settings = KvTransferSettings(
        MOONCAKE_V1, PRODUCER, module_path="vllm_ascend.distributed.mooncake_connector"
    )
    (error,) = errors(on_host(settings))
    assert "vllm_ascend.distributed.mooncake_connector" in error.what
    assert "Remove kv_connector_module_path" in error.hint
    # Ours (what the plan sets, seen again when a process plans the planned config) is fine.
    planned = KvTransferSettings(MOONCAKE_V1, PRODUCER, module_path=MOONCAKE_V1_MODULE)
    assert plan_config(on_host(planned)).errors == ()


def test_unknown_extra_keys_are_a_warning_naming_them() -> None:
    plan = plan_config(on_host(kv(prefil={"tp_size": 1})))
    assert plan.errors == ()
    assert any("prefil" in w and "ignored" in w for w in plan.warnings)


def test_settings_from_vllms_fields_and_the_bootstrap_port_from_the_environment() -> None:
    raw = {
        "kv_connector": MOONCAKE_V1,
        "kv_role": "kv_consumer",
        "kv_connector_extra_config": SIZES,
        "kv_port": "20001",
        "kv_load_failure_policy": "recompute",
    }
    settings = settings_from(raw)
    assert settings.role is CONSUMER and settings.kv_port == 20001
    assert settings.load_failure_policy == "recompute" and settings.extra["decode"]["tp_size"] == 1
    deployment = build_deployment(
        dense_model(),
        DeviceKind.CPU,
        ChipFamily.HOST,
        Requested(kv_transfer_role=CONSUMER, kv_transfer=settings),
        MappingEnvironment({"VLLM_MOONCAKE_BOOTSTRAP_PORT": "9100"}),
        QuantMethod.NONE,
        None,
    )
    assert deployment.kv_transfer is not None and deployment.kv_transfer.bootstrap_port == 9100
    with pytest.raises(ConfigError, match="kv_role='kv_prefill'"):
        settings_from({"kv_connector": MOONCAKE, "kv_role": "kv_prefill"})


def side(settings: KvTransferSettings, port: int, **kwargs: Any) -> PairSide:
    deployment = on_host(settings, model=kwargs.pop("model", None))
    return PairSide(
        deployment,
        kwargs.pop("block_size", 16),
        kwargs.pop("dtype", "auto"),
        http_port=port,
    )


def failing(checks: tuple[Any, ...]) -> dict[str, Any]:
    return {c.name: c for c in checks if not c.ok}


def test_a_matching_pair_passes_every_check_and_says_what_it_found() -> None:
    checks = check_pair(side(kv(PRODUCER, **SIZES), 8101), side(kv(CONSUMER, **SIZES), 8102))
    assert [c.name for c in checks] == [
        "roles",
        "connector",
        "transport",
        "ports",
        "model",
        "block size",
        "KV cache dtype",
        "parallel sizes",
        "fault bounds",
    ]
    assert failing(checks) == {}
    details = {c.name: c.detail for c in checks}
    assert details["transport"] == "prefill tcp, decode tcp"
    assert "bootstrap 8998" in details["ports"]


def test_a_pair_that_disagrees_fails_each_check_with_its_fix() -> None:
    prefill = side(kv(PRODUCER, mooncake_protocol="rdma"), 8998, block_size=16)
    decode = side(
        kv(CONSUMER, connector="NixlConnector", mooncake_protocol="tcp"),
        8998,
        block_size=128,
        dtype="fp8",
        model=mla_model(),
    )
    bad = failing(check_pair(prefill, decode))
    assert set(bad) == {
        "connector",
        "transport",
        "ports",
        "model",
        "block size",
        "KV cache dtype",
    }
    assert all(c.fix for c in bad.values())
    assert "bootstrap port 8998 is an HTTP port" in bad["ports"].detail


def test_roles_must_be_a_producer_and_a_consumer() -> None:
    (roles,) = check_pair(side(kv(CONSUMER), 1), side(kv(CONSUMER), 2))[:1]
    assert not roles.ok and "kv_producer" in roles.fix
    plain = PairSide(npu(), 16, "auto")
    assert [c.name for c in check_pair(plain, plain)] == ["roles"]


def test_the_stated_peer_sizes_must_be_what_the_peer_runs() -> None:
    wrong = {"prefill": {"tp_size": 1}, "decode": {"tp_size": 4}}
    bad = failing(check_pair(side(kv(PRODUCER, **wrong), 1), side(kv(CONSUMER, **SIZES), 2)))
    assert "kv_producer says decode.tp_size=4, it runs 1" in bad["parallel sizes"].detail


def test_mla_models_plan_and_dsa_models_are_refused_until_their_indexer_transfers() -> None:
    # MLA's latent planes go over the wire as their own regions
    # (adapters/vllm/kv_transfer/layout.py).
    assert errors(on_host(kv(**SIZES), model=mla_model())) == []
    (error,) = errors(on_host(kv(**SIZES), model=dsa_model()))
    assert "DeepseekV32ForCausalLM" in error.what and "indexer" in error.what
    assert "dense GQA and MLA models transfer" in error.hint
