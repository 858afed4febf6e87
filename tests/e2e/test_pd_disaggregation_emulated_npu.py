"""Prefill/decode disaggregation on the emulated NPU: both instances under
scripts/emulated_npu.py (VLLM_ASCEND_DEVICE=npu), their KV caches `npu` tensors over host
memory that Mooncake's TCP transport moves; vllm-router in front. An emulator, not Ascend
hardware: Ascend's own transport (HCCS/RoCE) is not exercised.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# The host module's pair and its concurrent-completions case, run against this pair.
from test_pd_disaggregation import (  # noqa: F401
    Pair,
    running_pair,
    test_concurrent_completions_through_the_router_match_one_instance,
)

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from running_pair(tmp_path_factory, "npu")


def test_both_sides_serve_on_the_npu_platform(pair: Pair) -> None:
    for side in ("prefill", "decode"):
        assert "NPU KV cache size" in pair.procs[side].text()
