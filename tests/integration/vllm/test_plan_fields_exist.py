"""Every VllmConfig path a plan's Change may name exists on the installed vLLM's config,
and applying a change of each kind sets what it names."""

from __future__ import annotations

import os

import pytest

from adapters.vllm.engine.configure import apply_change
from ascend_core.plan import fields
from ascend_core.plan.result import Change

CONFIG_PATHS = sorted(p for p in fields.ALL if not p.startswith(("env.", "additional_config.")))


@pytest.fixture(scope="module")
def vllm_config():  # type: ignore[no-untyped-def]
    from vllm.config import VllmConfig

    return VllmConfig()


@pytest.mark.parametrize("path", CONFIG_PATHS)
def test_the_path_is_a_field_of_vllm_config(vllm_config, path: str) -> None:  # type: ignore[no-untyped-def]
    from vllm.config import KVTransferConfig, ModelConfig

    section, *inner, attr = path.split(".")
    assert section in type(vllm_config).__dataclass_fields__, path
    # model_config and kv_transfer_config are None until given; the others are built.
    unset = {"model_config": ModelConfig, "kv_transfer_config": KVTransferConfig}
    owner = None if section in unset else getattr(vllm_config, section)
    for name in inner:  # nested sections, e.g. compilation_config.pass_config
        owner = getattr(owner, name)
    cls = unset[section] if owner is None else type(owner)
    fields_of = getattr(cls, "__dataclass_fields__", {})
    assert attr in fields_of, f"{path}: {cls.__name__} has no field {attr!r}"


def test_the_rest_are_environment_variables_or_additional_config_keys() -> None:
    others = sorted(fields.ALL - set(CONFIG_PATHS))
    assert others and all(p.startswith(("env.", "additional_config.")) for p in others), others


def test_applying_a_change_sets_the_named_field(vllm_config, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    apply_change(vllm_config, Change(fields.BLOCK_SIZE, None, 128, "test"))
    assert vllm_config.cache_config.block_size == 128
    monkeypatch.delenv("VLLM_ASCEND_ENABLE_FLASHCOMM1", raising=False)
    apply_change(vllm_config, Change(fields.SEQUENCE_PARALLEL, "1", "0", "test"))
    assert os.environ["VLLM_ASCEND_ENABLE_FLASHCOMM1"] == "0"
    apply_change(vllm_config, Change(fields.FUSE_NORM_QUANT, None, False, "test"))
    assert vllm_config.compilation_config.pass_config.fuse_norm_quant is False


def test_the_planned_connector_module_is_where_vllms_factory_finds_ours() -> None:
    """The plan names PluginModule.MOONCAKE_V1 (the core names no adapter module); applied,
    it is the adapter's path, from which vLLM's connector factory takes our class."""
    from vllm.config import KVTransferConfig, VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    from adapters.vllm.kv_transfer import read_module_path
    from ascend_core.kv_transfer import MOONCAKE_V1, MOONCAKE_V1_MODULE

    config = VllmConfig()  # vLLM checks the connector's name as it builds the config
    config.kv_transfer_config = KVTransferConfig(kv_connector=MOONCAKE_V1, kv_role="kv_producer")
    apply_change(config, Change(fields.KV_CONNECTOR_MODULE, None, MOONCAKE_V1_MODULE, "test"))
    path = config.kv_transfer_config.kv_connector_module_path
    assert isinstance(path, str) and path.endswith("kv_transfer.connector")
    connector = KVConnectorFactory.get_connector_class(config.kv_transfer_config)
    assert connector.__name__ == MOONCAKE_V1 and connector.__module__ == path
    # Planned again (translate reads it so): the plugin's own, so not refused.
    assert read_module_path(path) is MOONCAKE_V1_MODULE
