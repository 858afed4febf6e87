"""Expert parallelism on the emulated NPU at EP world 4, op level: four ranks over gloo
with 5, 3, 4 and 2 tokens, 8 experts (2 a rank), top-2, hidden 64, bf16, A2 ranks
(moe_comm_world4_run.py). MC2, all-to-all and all-gather give the host's single-device
outputs (all-to-all bit-exact, the others within one bf16 ulp of the largest output, as
test_npu_moe_comm.py says why), each rank's dispatch receives exactly the rows all four
ranks routed to its two experts, ranks holding their neighbour's experts leave the
reference, and a dispatch that names world 2 on the 4-rank group is refused. One fresh
process (the runner forks the four ranks); an emulator, not Ascend hardware.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).with_name("moe_comm_world4_run.py")
ONE_ULP = 2.0**-7
TOKENS = (5, 3, 4, 2)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("moe_comm_world4")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(RUN), str(out)], capture_output=True,
                          text=True, env=env, timeout=600, check=False)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    said = proc.stdout[-1500:] + proc.stderr[:2500] + "\n[...]\n" + proc.stderr[-1500:]
    assert proc.returncode == 0 and len(lines) == 4, said
    results = [json.loads(x.removeprefix("RESULT ")) for x in lines]
    for result in results:
        assert "error" not in result, result["error"]
    return results


def test_each_path_gives_the_single_device_outputs_at_world_4(ranks: list[dict]) -> None:
    for rank, tokens in zip(ranks, TOKENS, strict=True):
        for path in ("mc2", "all_to_all", "all_gather"):
            got = rank[path]
            assert got["shape"] == [tokens, 64], (rank["rank"], path, got)
            assert got["max_abs"] <= ONE_ULP * rank["ref_max"], (rank["rank"], path, got)
        assert rank["all_to_all"]["max_abs"] == 0.0, rank


def test_each_rank_receives_the_rows_all_four_routed_to_its_experts(ranks: list[dict]) -> None:
    ids = [slot for rank in ranks for token in rank["ids"] for slot in token]
    for r, rank in enumerate(ranks):
        assert rank["token_nums"] == [ids.count(e) for e in (2 * r, 2 * r + 1)], rank


def test_neighbours_experts_leave_the_reference(ranks: list[dict]) -> None:
    for rank in ranks:
        assert rank["shifted_max_abs"] > 0.1 * rank["ref_max"], rank


def test_a_dispatch_naming_world_2_on_four_ranks_is_refused(ranks: list[dict]) -> None:
    for rank in ranks:
        assert "ep_world_size 2 but" in rank["world_2_refused"], rank
