"""The emulated HCCL's point-to-point (torch.distributed.batch_isend_irecv of `npu`
tensors), as vLLM's EPLB moves expert weights between two ranks: every rank gets its
peer's tensors on its own device, and a request waited again returns at once (as HCCL's
do; a gloo P2P request waited twice never returns, which once hung the EPLB engine at its
first rebalance). No engine: two forked ranks, a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).with_name("hccl_p2p_run.py")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("hccl_p2p")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(RUN), str(out)], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and len(lines) == 2, proc.stdout[-1500:] + proc.stderr[-2500:]
    results = [json.loads(x.removeprefix("RESULT ")) for x in lines]
    for result in results:
        assert "error" not in result, result["error"]
    return results


def test_each_rank_receives_its_peers_npu_tensors(ranks: list[dict]) -> None:
    for result in ranks:
        peer = 1 - result["rank"]
        assert result["devices"] == ["npu"]
        assert result["received"] == [[10.0 * peer] * 12, [10.0 * peer + 1] * 5]


def test_every_request_is_waited_twice_and_returns(ranks: list[dict]) -> None:
    assert [r["requests"] for r in ranks] == [4, 4]
