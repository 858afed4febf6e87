"""Expert parallelism on the emulated NPU, op level: two ranks over gloo, each with its own
tokens (6 and 4), 8 experts (4 a rank), top-2, hidden 64, bf16, on A2 ranks (Ascend910B1;
CANN's A2 MC2 takes a hidden size that is a multiple of 32, A3's takes 1024 and above).
The NPU adapter's MC2
(npu_moe_distribute_dispatch_v2 / combine_v2), all-to-all (npu_moe_init_routing_v2,
all_to_all_single, npu_grouped_matmul, npu_moe_token_unpermute) and all-gather paths
against the host's single-device experts (CpuMoeOps.experts over all 8 experts), and the
MC2 ops' refusals (support/torch_npu_emulator/semantics_mc2.py); MC2 with W8A8_DYNAMIC
experts (dispatch quant_mode 2) against the host's quantized experts; MC2 captured in an
NPU graph on the emulated device and replayed. One fresh process
(moe_comm_run.py spawns the two ranks).

Tolerance: all-to-all runs the host's roundings (the same unpermute) and must be bit-exact;
MC2's combine and the all-gather's all-reduce sum each token's k rows in float32 and round
once, where the host rounds each weighted row and each add to bf16, so they may differ by
one bf16 ulp of the largest output: max |y - ref| <= 2^-7 * max |ref|.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).with_name("moe_comm_run.py")
ONE_ULP = 2.0**-7


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("moe_comm")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(RUN), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    # A rank's own failure is in stderr's first lines, the launcher's traceback in its last.
    said = proc.stdout[-1500:] + proc.stderr[:2500] + "\n[...]\n" + proc.stderr[-1500:]
    assert proc.returncode == 0 and len(lines) == 2, said
    results = [json.loads(x.removeprefix("RESULT ")) for x in lines]
    for result in results:
        assert "error" not in result, result["error"]
    return results


def test_each_path_gives_the_single_device_outputs(ranks: list[dict]) -> None:
    for rank, tokens in zip(ranks, (6, 4), strict=True):
        for path in ("mc2", "all_to_all", "all_gather"):
            got = rank[path]
            assert got["shape"] == [tokens, 64] and got["dtype"] == "torch.bfloat16"
            assert got["max_abs"] <= ONE_ULP * got["ref_max"], (rank["rank"], path, got)
        assert rank["all_to_all"]["max_abs"] == 0.0


def test_mc2_runs_one_dispatch_and_one_combine_on_the_named_group(ranks: list[dict]) -> None:
    for rank in ranks:
        assert rank["dispatch_calls"] == 1 and rank["combine_calls"] == 1
        assert rank["dispatch_group"]
    # Each rank's local experts receive the rows routed to them from both ranks.
    ids = [slot for rank in ranks for token in rank["ids"] for slot in token]
    for r, rank in enumerate(ranks):
        expected = [ids.count(e) for e in range(4 * r, 4 * r + 4)]
        assert rank["token_nums"] == expected


def test_mc2_sends_w8a8_dynamic_tokens_as_int8_with_their_scales(ranks: list[dict]) -> None:
    """Against the host's W8A8_DYNAMIC experts over all 8 experts (CpuQuantMoeOps): the
    same int8 rows and GEMMs, the combine's one rounding apart (one bf16 ulp)."""
    for rank in ranks:
        got = rank["w8a8"]
        assert got["quant_mode"] == 2 and got["first_gmm_x"] == "torch.int8"
        assert got["dtype"] == "torch.bfloat16"
        assert got["max_abs"] <= ONE_ULP * got["ref_max"], got
        # The other methods (w8a8_dynamic): all-to-all sends the int8 rows and their
        # float32 scales beside the int64 counts, the experts' bf16 outputs come back;
        # all-gather sends nothing by all-to-all. Both the host's outputs, within the
        # combine's rounding.
        alltoall, allgather = got["alltoall"], got["allgather"]
        sent = ["torch.bfloat16", "torch.float32", "torch.int64", "torch.int8"]
        assert alltoall["sent"] == sent, alltoall
        assert allgather["sent"] == [], allgather
        for path in (alltoall, allgather):
            assert path["dtype"] == "torch.bfloat16"
            assert path["max_abs"] <= ONE_ULP * got["ref_max"], (path, got["ref_max"])


def test_mc2_is_captured_in_an_npu_graph_and_replays_on_new_tokens(ranks: list[dict]) -> None:
    """On the emulated device: the capture reads nothing back to the host, records one
    dispatch and one combine, and its replay (both ranks meeting in the recorded
    collectives) on another step's tokens gives the host's outputs for them."""
    for rank in ranks:
        got = rank["graph"]
        assert got["host_reads_in_capture"] == 0 and got["changed"]
        assert (got["dispatch_nodes"], got["combine_nodes"]) == (1, 1)
        assert got["replay_max_abs"] <= ONE_ULP * got["ref_max"], got


def test_the_core_decision_picks_the_path_by_step_size(ranks: list[dict]) -> None:
    for rank in ranks:
        d = rank["decision"]
        assert (d["small"], d["large"]) == ("mc2", "alltoall")
        assert (d["small_dispatches"], d["large_dispatches"]) == (1, 0)
        assert d["small_max_abs"] <= ONE_ULP * rank["mc2"]["ref_max"]
        assert d["large_max_abs"] == 0.0


def test_tokens_at_the_wrong_rank_leave_the_reference(ranks: list[dict]) -> None:
    """Each rank holding the other's experts: MC2 still runs, the outputs are wrong."""
    for rank in ranks:
        assert rank["swapped_max_abs"] > 0.1 * rank["mc2"]["ref_max"]


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("unknown_group", "is not a live HCCL communicator name"),
        ("expert_no_rank_holds", "experts no rank of"),
        ("float32_x", "x is 2D float16/bfloat16"),
        ("int64_ids", "expert_ids is 2D int32"),
        ("world_size", "ep_world_size 4 but"),
        ("rank_id", "but this rank is"),
        ("uneven_bs_without_global_bs", "ranks' BS differ ([6, 4]) and global_bs is 0"),
        ("tp_domain", "not modelled"),
        ("a3_hidden", "H 64 outside [1024, 8192] on A3"),
        ("combine_wrong_rank", "expert_ids are not the ones dispatched"),
    ],
)
def test_mc2_refusals(ranks: list[dict], case: str, says: str) -> None:
    for rank in ranks:
        assert says in rank["refusals"][case], rank["refusals"][case]
