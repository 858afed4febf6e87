"""The fault bounds our MooncakeConnectorV1 gives vLLM's connector worker
(adapters/vllm/kv_transfer/connector.py): the pull deadline rides on vLLM's own receive timeout,
and the prefill side's hold is checked where vLLM builds a write. Checked against the
installed vLLM's source and with real zmq sockets; tests/e2e/test_pd_faults.py runs them."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

import pytest

pytestmark = pytest.mark.vllm


def _worker_source(method: str) -> str:
    from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector import (
        MooncakeConnectorWorker,
    )

    return inspect.getsource(getattr(MooncakeConnectorWorker, method))


def test_vllms_pull_waits_on_a_receive_timeout_of_a_socket_from_the_workers_context() -> None:
    source = _worker_source("receive_kv_from_single_worker")
    assert "self.async_zmq_ctx" in source and "zmq.RCVTIMEO" in source
    assert "sock.setsockopt(" in source
    # A timed-out receive raises, and vLLM fails the pull (then the policy applies).
    assert "except Exception as e:" in source and "self._handle_failed_recv(" in source


def test_vllms_prefill_side_writes_what_build_transfer_params_returns() -> None:
    source = _worker_source("send_kv_to_decode")
    assert "await self._build_transfer_params(" in source
    assert "err_req_set = set(err_reqs)" in source  # err_reqs are neither written nor counted


def test_a_pull_socket_of_the_deadline_context_gives_up_at_the_deadline() -> None:
    import zmq
    from vllm.utils.network_utils import make_zmq_socket

    from adapters.vllm.kv_transfer.connector import _deadline_context

    ctx = _deadline_context(0.3)

    async def pull_from_nobody() -> float:
        start = time.monotonic()
        # As vLLM builds its pull socket, to a prefill that never answers.
        with make_zmq_socket(ctx, "tcp://127.0.0.1:9", zmq.DEALER, bind=False, linger=0) as sock:
            sock.setsockopt(zmq.RCVTIMEO, 540 * 1000)  # vLLM's hold + 60 s
            await sock.send(b"pull")
            with pytest.raises(zmq.Again):
                await sock.recv()
        return time.monotonic() - start

    try:
        took = asyncio.run(pull_from_nobody())
    finally:
        ctx.term()
    assert 0.25 < took < 5


def test_the_prefill_side_writes_nothing_for_a_request_past_its_hold() -> None:
    """A prefill instance resumed after a stall may read a pull before its step loop expires
    the request (the e2e run saw the loop win): the write is refused there too."""
    from types import SimpleNamespace

    from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector import (
        SendBlockMeta,
    )

    from adapters.vllm.kv_transfer.connector import bound_transfers
    from ascend_core.kv_transfer import FaultBounds

    built: list[list[str]] = []

    async def vllms_build(ready: list[Any], *_: Any) -> tuple[Any, ...]:
        built.append([d_req for d_req, _ in ready])
        return [1], [2], [3], [], None

    # vLLM's worker as far as bound_transfers touches it, on the prefill side.
    worker = SimpleNamespace(
        is_kv_producer=True, is_kv_consumer=False, _build_transfer_params=vllms_build
    )
    bound_transfers(worker, FaultBounds("fail", 4, 8.0, True))  # type: ignore[arg-type]
    now = time.perf_counter()

    def meta(expire: float) -> SendBlockMeta:
        return SendBlockMeta("p", "t", [[0]], asyncio.Event(), expire_time=expire)

    ready = [("in-time", meta(now + 60)), ("late", meta(now - 1))]
    src, _, _, err_reqs, err_msg = asyncio.run(
        worker._build_transfer_params(ready, None, None, None)
    )
    assert built == [["in-time"]] and src == [1]
    assert err_reqs == ["late"] and "held past 4 s" in err_msg
