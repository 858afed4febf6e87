"""A decode instance (kv_consumer) that gets requests without Mooncake's transfer
parameters says so once, with the likely cause and the fix: the scheduler-side hook of our
MooncakeConnectorV1 (adapters/vllm/kv_transfer/connector.py) built on vLLM's own
connector, config and request classes; no engine, no Mooncake engine."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch


def _connector(role: str) -> Any:
    from vllm.config import KVTransferConfig, VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

    from adapters.vllm.kv_transfer import module_path
    from adapters.vllm.kv_transfer.connector import MooncakeConnectorV1
    from ascend_core.deployment import PluginModule

    kv = KVTransferConfig(
        kv_connector="MooncakeConnectorV1",
        kv_role=role,
        kv_connector_module_path=module_path(PluginModule.MOONCAKE_V1),
    )
    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8, dtype=torch.float32)
    cache = KVCacheConfig(
        num_blocks=8, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["l0"], spec)]
    )
    return MooncakeConnectorV1(VllmConfig(kv_transfer_config=kv), KVConnectorRole.SCHEDULER, cache)


def _request(req_id: str, params: dict[str, Any] | None) -> Any:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    extra = {"kv_transfer_params": params} if params is not None else None
    return Request(
        req_id,
        prompt_token_ids=list(range(40)),
        sampling_params=SamplingParams(max_tokens=2, extra_args=extra),
        pooling_params=None,
    )


PULL = {
    "do_remote_prefill": True,
    "remote_engine_id": "prefill-engine",
    "remote_bootstrap_addr": "http://127.0.0.1:8998",
    "transfer_id": "t-1",
}


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "transfer parameters" in r.getMessage()
    ]


def test_a_decode_instance_says_once_that_requests_come_without_transfer_parameters(
    caplog: pytest.LogCaptureFixture,
) -> None:
    connector = _connector("kv_consumer")
    caplog.set_level(logging.WARNING, logger="vllm.plugins.ascend")
    # As the router sends it: the prompt's KV is pulled, nothing said.
    assert connector.get_num_new_matched_tokens(_request("routed", dict(PULL)), 0) == (40, True)
    assert not _warnings(caplog)
    # A router without --kv-connector mooncake: no parameters; computed here, said once.
    for n in range(3):
        assert connector.get_num_new_matched_tokens(_request(f"plain-{n}", None), 0) == (0, False)
    (said,) = _warnings(caplog)
    assert "request plain-0" in said and "computes the whole prompt itself" in said
    assert "--kv-connector mooncake" in said and "bootstrap port" in said
    assert "ascend-doctor pair" in said


def test_parameters_without_the_pull_keys_are_said_too(caplog: pytest.LogCaptureFixture) -> None:
    connector = _connector("kv_consumer")
    caplog.set_level(logging.WARNING, logger="vllm.plugins.ascend")
    no_bootstrap = {k: v for k, v in PULL.items() if k != "remote_bootstrap_addr"}
    connector.get_num_new_matched_tokens(_request("half", no_bootstrap), 0)
    (said,) = _warnings(caplog)
    assert "lack remote_bootstrap_addr" in said


def test_a_prefill_instance_says_nothing_of_plain_requests(
    caplog: pytest.LogCaptureFixture,
) -> None:
    connector = _connector("kv_producer")
    caplog.set_level(logging.WARNING, logger="vllm.plugins.ascend")
    assert connector.get_num_new_matched_tokens(_request("plain", None), 0) == (0, False)
    assert not _warnings(caplog)
