"""Prefill/decode disaggregation of an MLA model on the host device: tiny DeepSeek-V2 served
by one prefill and one decode `vllm serve` behind vllm-router, KV over Mooncake's TCP
transport (the pair and helpers of test_pd_disaggregation.py).

Each MLA layer's latent cache is two planes here (latent rows, then rope rows), which the
connector sends as two transfer regions (adapters/vllm/kv_transfer/layout.py): 16 concurrent
requests through the router give the ids one instance gives alone, the decode side
logged the KV of every prompt token as received, and computed none of them again.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from test_pd_disaggregation import (
    Pair,
    _complete,
    _ids,
    _pd_packages_missing,
    _routed_as_alone,
)

from support.hf_reference import local_model

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    missing = _pd_packages_missing()
    if missing:
        pytest.skip(missing)
    model = str(local_model("deepseek_v2", "tiny"))
    running = Pair(model, tmp_path_factory.mktemp("pd-mla-cpu"), "cpu")
    try:
        running.start()
        yield running
    finally:
        running.stop()


def test_sixteen_concurrent_mla_requests_through_the_router_match_one_instance(
    pair: Pair,
) -> None:
    # 3 layers of tiny DeepSeek-V2, each its latent plane and its rope plane, on both sides.
    for side in ("prefill", "decode"):
        assert re.search(
            r"Mooncake transfer regions: 3 MLA layers as their latent and rope planes "
            r"\(6 regions\)",
            pair.procs[side].text(),
        ), side
    # Prompts from one block to several (block size 16), so blocks move in runs and alone.
    prompts = [f"Request {i}: the latent planes " + "move " * (i * 5) for i in range(16)]
    # The reference ids from the prefill instance alone: the decode side's prefix cache then
    # holds none of these prompts, and every prompt token's KV has to come over the wire.
    alone = [_ids(_complete(pair.url["prefill"], pair.model, p)) for p in prompts]
    prompt_lengths = _routed_as_alone(pair, prompts, alone)
    assert max(prompt_lengths) > 4 * 16  # some requests move several blocks
