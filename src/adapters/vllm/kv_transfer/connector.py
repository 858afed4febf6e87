"""The reference's `MooncakeConnectorV1` name, served by vLLM's MooncakeConnector.

vLLM loads it through kv_connector_module_path, which the plan sets for that name
(ascend_core/kv_transfer.py; the path itself is adapters/vllm/kv_transfer/__init__.py's),
so every process that builds a connector finds it. Five
additions to vLLM's connector, nothing else:
- the transport defaults to the device's (TCP on the host, Ascend's on an NPU), and
  `use_ascend_direct: true` asks for Ascend's, as the reference's keys mean;
- the decode side says once when a request comes without Mooncake's transfer parameters
  (it then computes the whole prompt itself: a router started without `--kv-connector
  mooncake` or without the prefill's bootstrap port), naming the fix;
- the decode side logs, per request, how many prompt tokens' KV it pulls, from which
  prefill engine, and in how long (the scheduler's view: from the request's admission to
  the worker reporting the blocks received), or that the load failed and what the
  kv_load_failure_policy does about it;
- faults end in stated time (ascend_core.kv_transfer.FaultBounds): the decode side gives a
  pull up when the prefill side has not answered for `pull_timeout_s` (vLLM waits
  VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT + 60 s, 540 s by default, for a dead prefill), and the
  prefill side starts no write for a request past its hold (vLLM checks the hold only
  between steps, so a prefill instance resumed after a stall could write KV into blocks the
  decode side had given up on and reused);
- an MLA layer's latent cache is two planes here, so its transfer region is made two
  (adapters/vllm/kv_transfer/layout.py) once vLLM has registered the caches.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import zmq
import zmq.asyncio
from attrs import evolve
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector import (
    MooncakeConnector,
)
from vllm.v1.request import RequestStatus

from adapters.vllm.kv_transfer import layout as kv_layout
from ascend_core import kv_routing, kv_transfer

if TYPE_CHECKING:
    import torch
    from vllm.config import VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector import (
        MooncakeConnectorWorker,
    )
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

    from ascend_core.deployment import KvTransferSettings

logger = logging.getLogger("vllm.plugins.ascend")



def _settings(vllm_config: VllmConfig) -> KvTransferSettings:
    """The core's reading of this instance's kv_transfer_config."""
    kv = vllm_config.kv_transfer_config
    assert kv is not None
    return kv_transfer.settings_from(
        {
            "kv_connector": kv.kv_connector,
            "kv_role": kv.kv_role,
            "kv_connector_extra_config": kv.kv_connector_extra_config,
            "kv_load_failure_policy": kv.kv_load_failure_policy,
        }
    )


def device_transport(vllm_config: VllmConfig) -> str:
    """The Mooncake protocol this instance uses: the one configured, else the device's."""
    from vllm.platforms import current_platform

    from ports.device import DeviceKind

    settings = _settings(vllm_config)
    device = getattr(current_platform, "device_kind", DeviceKind.CPU)
    chosen = kv_transfer.transport(settings, device)
    if chosen is None:  # the plan refuses an unknown protocol before we get here
        raise ValueError(f"unknown mooncake_protocol in {settings.extra}")
    return chosen.value


def fault_bounds(vllm_config: VllmConfig) -> kv_transfer.FaultBounds:
    """This instance's hold and pull deadline (the core's decision over its settings)."""
    import vllm.envs as envs

    settings = _settings(vllm_config)
    hold = int(envs.VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT)
    return kv_transfer.fault_bounds(evolve(settings, abort_timeout=hold))


def bound_transfers(worker: MooncakeConnectorWorker, bounds: kv_transfer.FaultBounds) -> None:
    """Give vLLM's connector worker the bounds: a deadline on each pull (decode side) and
    no write past the hold (prefill side). Only this connector's worker is touched."""
    if not worker.is_kv_producer:
        # vLLM's pull waits on its socket's receive timeout, which it sets to the hold plus
        # 60 s; the pull sockets of this context take the deadline instead, and a pull that
        # times out is failed by vLLM's own path (then kv_load_failure_policy applies).
        old = worker.async_zmq_ctx
        worker.async_zmq_ctx = _deadline_context(bounds.pull_timeout_s)
        old.term()
    if not worker.is_kv_consumer:
        build = worker._build_transfer_params

        async def build_in_time(
            ready_reqs: list[tuple[str, Any]],
            agent_meta: Any,
            local_regions: Any,
            remote_regions: Any,
        ) -> tuple[list[int], list[int], list[int], list[str], str | None]:
            now = time.perf_counter()  # vLLM's expire_time clock
            late = [d_req for d_req, meta in ready_reqs if meta.expire_time < now]
            fresh = [(d_req, meta) for d_req, meta in ready_reqs if meta.expire_time >= now]
            src, dst, lengths, err_reqs, err_msg = await build(
                fresh, agent_meta, local_regions, remote_regions
            )
            if not late:
                return src, dst, lengths, err_reqs, err_msg
            why = (
                f"held past {bounds.hold_s} s ({kv_transfer.HOLD_VARIABLE}): the prefill "
                "side frees these blocks and sends nothing"
            )
            logger.warning("KV not sent: requests %s %s.", late, why)
            return src, dst, lengths, [*err_reqs, *late], "; ".join(filter(None, [err_msg, why]))

        worker._build_transfer_params = build_in_time  # type: ignore[method-assign]


def _deadline_context(seconds: float) -> zmq.asyncio.Context:
    """A zmq context whose sockets take `seconds` as their receive timeout whenever one is
    set (vLLM sets one on its pull sockets only; the prefill's listener has none)."""
    timeout_ms = max(1, round(seconds * 1000))

    class DeadlineSocket(zmq.asyncio.Socket):
        def setsockopt(self, option: int, optval: Any) -> None:
            if option == zmq.RCVTIMEO:
                optval = timeout_ms
            super().setsockopt(option, optval)

    class DeadlineContext(zmq.asyncio.Context):
        _socket_class = DeadlineSocket

    return DeadlineContext()


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
        self._bounds = fault_bounds(vllm_config)
        if self.connector_worker is not None:
            bound_transfers(self.connector_worker, self._bounds)
        else:  # said once per instance, by its scheduler
            logger.info(
                "P/D faults: this %s %s.",
                kv.kv_role,
                self._bounds.producer_says()
                if kv.kv_role == "kv_producer"
                else self._bounds.consumer_says(),
            )
        # A decode instance says once that requests come without transfer parameters.
        self._say_no_pull = kv.kv_role == "kv_consumer"
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
        if self._say_no_pull:
            what = kv_routing.missing_transfer_params(request.kv_transfer_params)
            if what is not None:
                self._say_no_pull = False
                logger.warning(kv_routing.no_pull_warning(request.request_id, what))
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
                self._say_load_failed(req_id, entry)
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

    def _say_load_failed(self, req_id: str, entry: tuple[int, str, str, float]) -> None:
        logger.warning(
            "KV load failed: request %s, %d prompt tokens' KV from prefill engine %s "
            "at %s after %.3f s (pull deadline %g s); kv_load_failure_policy=%s (%s).",
            req_id,
            entry[0],
            entry[1],
            entry[2],
            time.monotonic() - entry[3],
            self._bounds.pull_timeout_s,
            self._failure_policy,
            "the decode side computes the prompt itself"
            if self._failure_policy == "recompute"
            else "the request ends with an error",
        )

    def _forget(self, request: Request) -> None:
        """A request that ends before its KV arrived (aborted, failed): said once."""
        entry = self._receiving.pop(request.request_id, None)
        self._blocks.pop(request.request_id, None)
        if entry is not None and request.status is RequestStatus.FINISHED_ERROR:
            # kv_load_failure_policy=fail ends the request before the connector hears of it.
            self._say_load_failed(request.request_id, entry)
        elif entry is not None:
            logger.warning(
                "KV not received: request %s finished (%s) before the %d prompt tokens' KV "
                "from prefill engine %s at %s arrived.",
                request.request_id,
                request.status.name,
                entry[0],
                entry[1],
                entry[2],
            )
