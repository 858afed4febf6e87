"""The reference's `MooncakeConnectorV1` name, served by vLLM's MooncakeConnector.

vLLM loads it through kv_connector_module_path, which the plan sets for that name
(ascend_core/kv_transfer.py), so every process that builds a connector finds it. Two
additions to vLLM's connector, nothing else:
- the transport defaults to the device's (TCP on the host, Ascend's on an NPU), and
  `use_ascend_direct: true` asks for Ascend's, as the reference's keys mean;
- the decode side logs, per request, how many prompt tokens' KV it pulls, from which
  prefill engine, and in how long (the scheduler's view: from the request's admission to
  the worker reporting the blocks received), or that the load failed and what the
  kv_load_failure_policy does about it;
- an MLA layer's latent cache is two planes here, so its transfer region is made two
  (adapters/vllm/kv_layout.py) once vLLM has registered the caches.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector import (
    MooncakeConnector,
)

from adapters.vllm import kv_layout
from ascend_core import kv_transfer

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

logger = logging.getLogger("vllm.plugins.ascend")

MODULE_PATH = "adapters.vllm.kv_connector"


def device_transport(vllm_config: VllmConfig) -> str:
    """The Mooncake protocol this instance uses: the one configured, else the device's."""
    from vllm.platforms import current_platform

    from ports.device import DeviceKind

    kv = vllm_config.kv_transfer_config
    assert kv is not None
    settings = kv_transfer.settings_from(
        {
            "kv_connector": kv.kv_connector,
            "kv_role": kv.kv_role,
            "kv_connector_extra_config": kv.kv_connector_extra_config,
        }
    )
    device = getattr(current_platform, "device_kind", DeviceKind.CPU)
    chosen = kv_transfer.transport(settings, device)
    if chosen is None:  # the plan refuses an unknown protocol before we get here
        raise ValueError(f"unknown mooncake_protocol in {kv.kv_connector_extra_config}")
    return chosen.value


class MooncakeConnectorV1(MooncakeConnector):
    """vLLM's MooncakeConnector under the reference's name and configuration keys."""

    def __init__(
        self,
        vllm_config: VllmConfig,
        role: KVConnectorRole,
        kv_cache_config: KVCacheConfig,
    ) -> None:
        kv = vllm_config.kv_transfer_config
        assert kv is not None
        # vLLM's worker reads mooncake_protocol; the reference's keys choose it here.
        kv.kv_connector_extra_config.setdefault("mooncake_protocol", device_transport(vllm_config))
        super().__init__(vllm_config, role, kv_cache_config)
        self._failure_policy = str(kv.kv_load_failure_policy)
        # request id -> (prompt tokens to receive, prefill engine, bootstrap address, start)
        self._receiving: dict[str, tuple[int, str, str, float]] = {}
        # request id -> the local blocks its KV goes to (a failed load names blocks)
        self._blocks: dict[str, set[int]] = {}

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        super().register_kv_caches(kv_caches)
        planes = kv_layout.latent_layers(self._vllm_config, kv_caches)
        if not planes:
            return
        worker = self.connector_worker
        regions = kv_layout.split_latent_regions(kv_layout.read_regions(worker), planes)
        kv_layout.write_regions(worker, regions)
        logger.info(
            "Mooncake transfer regions: %d MLA layers as their latent and rope planes "
            "(%d regions).",
            len(planes),
            len(regions),
        )

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        count, load_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
        params = request.kv_transfer_params or {}
        if count and load_async and request.request_id not in self._receiving:
            self._receiving[request.request_id] = (
                int(count),
                str(params.get("remote_engine_id")),
                str(params.get("remote_bootstrap_addr")),
                time.monotonic(),
            )
        return count, load_async

    def update_state_after_alloc(
        self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int
    ) -> None:
        super().update_state_after_alloc(request, blocks, num_external_tokens)
        if request.request_id in self._receiving:
            self._blocks[request.request_id] = {b for g in blocks.get_block_ids() for b in g}

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        super().update_connector_output(connector_output)
        failed = set(connector_output.failed_recving or ())
        invalid = connector_output.invalid_block_ids or set()
        failed |= {r for r, blocks in self._blocks.items() if blocks & invalid}
        for req_id in failed:
            entry = self._receiving.pop(req_id, None)
            self._blocks.pop(req_id, None)
            if entry is not None:
                logger.warning(
                    "KV load failed: request %s, %d prompt tokens' KV from prefill engine %s "
                    "at %s after %.3f s; kv_load_failure_policy=%s (%s).",
                    req_id,
                    entry[0],
                    entry[1],
                    entry[2],
                    time.monotonic() - entry[3],
                    self._failure_policy,
                    "the decode side computes the prompt itself"
                    if self._failure_policy == "recompute"
                    else "the request ends with an error",
                )
        for req_id in connector_output.finished_recving or ():
            entry = self._receiving.pop(req_id, None)
            self._blocks.pop(req_id, None)
            if entry is None:
                continue
            tokens, engine, address, start = entry
            logger.info(
                "KV received: request %s, %d prompt tokens' KV from prefill engine %s at %s "
                "in %.3f s.",
                req_id,
                tokens,
                engine,
                address,
                time.monotonic() - start,
            )

    def request_finished(
        self, request: Request, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        self._forget(request)
        return super().request_finished(request, block_ids)

    def request_finished_all_groups(
        self, request: Request, block_ids: tuple[list[int], ...]
    ) -> tuple[bool, dict[str, Any] | None]:
        self._forget(request)
        return super().request_finished_all_groups(request, block_ids)

    def _forget(self, request: Request) -> None:
        """A request that ends before its KV arrived (aborted, failed): said once."""
        entry = self._receiving.pop(request.request_id, None)
        self._blocks.pop(request.request_id, None)
        if entry is not None:
            logger.warning(
                "KV not received: request %s finished (%s) before the %d prompt tokens' KV "
                "from prefill engine %s at %s arrived.",
                request.request_id,
                request.status.name,
                entry[0],
                entry[1],
                entry[2],
            )
