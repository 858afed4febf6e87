"""`vllm serve --data-parallel-size 2 --enable-expert-parallel --enable-eplb` (TP 1 a DP
rank, the DeepSeek decode shape) on two emulated A3 NPUs, NPU graphs in the plan's default
mode (FULL_AND_PIECEWISE): completions give the single-device ids, across EPLB rebalances.

One server for the module: vLLM's DP coordinator and two engine cores, one a DP rank,
each with its NPU worker on its own emulated NPU. Each step vLLM's runner all-reduces the
ranks' token counts (vllm/v1/worker/dp_utils.py), takes the least graph mode of any rank
and pads both ranks to the same captured size; an idle rank runs a dummy step. Each MoE
layer sends its own rank's tokens to the experts' ranks and back (our communicator's
naive dispatch gathers nothing): MC2 (npu_moe_distribute_dispatch_v2 / combine_v2) inside
the captured decode steps, all-to-all in the eager prefill chunks above MC2's capacity
(the plan's choice on A3 for this model; both logged per layer).

The reference is TP 1 eager on one emulated NPU (integration/npu/npu_expert_parallel_run.py,
bf16, with each step's top-2 logprobs), started beside the server: the EP ranks add the
experts' rows in another order, so a sequence may part from it only where the reference's
top-2 logprobs were a near-tie (the gap is in the failure message). The prompts go to the
server at once, so both DP ranks serve some.

The server runs vLLM's EPLB too (--enable-eplb, 2 redundant experts: 10 physical experts,
5 a rank; a rebalance every 6 steps over a 4-step load window), so each batch of the ids
tests is served across rebalances (vLLM's EplbState on each rank, stepped by the real and
the dummy steps alike, the weights moved over the EP group of the two engine cores). With
log_balancedness vLLM logs each step's recorded expert load, all-reduced over the ranks:
it sums to each batch's tokens x top-k x MoE layers, so neither a DP dummy step nor a
rank's padding rows are counted. After each batch both engine cores' workers give their
EPLB state (npu_eplb_run.EplbViews through the server's collective_rpc endpoint, in
VLLM_SERVER_DEV_MODE): the two DP ranks hold the same physical -> logical map, the first
rebalance changed it, and every physical slot holds the weights of the logical expert the
new map names. An emulator, not Ascend hardware.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from integration.npu.npu_eplb_run import weights_follow_the_map
from integration.npu.npu_expert_parallel_run import (
    CAPTURE_SIZES,
    MAX_NEW,
    decode_prompts,
    prompts,
)
from support.hf_reference import MODELS_DIR, make_model
from support.torch_npu_emulator.activate import child_env

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

A3 = "Ascend910_9391"
RUNNER = Path(__file__).parents[1] / "integration" / "npu" / "npu_expert_parallel_run.py"
_REPO = Path(__file__).resolve().parents[2]
_VENV_BIN = Path(sys.executable).parent
# test_expert_parallel_on_emulated_npu.py's bf16 near-tie bound (TOLERANCE_NATS).
NEAR_TIE_NATS = 0.25
_CAPTURED = re.compile(r"Captured (\w+) graphs for sizes \[([\d, ]*)\]")
# vLLM's EplbState.rearrange on EP rank 0, a rebalance while serving (the start-up
# profile's one says "(profile)").
_REBALANCE = "Rearranging experts sync mode ..."
_REBALANCED = re.compile(r"Rearranged experts   in [\d.]+ s\.")
# log_balancedness: each step's expert load over the EP ranks, summed over the MoE layers
# (avg_tokens is the mean over the ranks).
_LOAD = re.compile(r"EPLB step: \d+ for model .+?: avg_tokens=([\d.]+), max_tokens=\d+")
EP_RANKS = 2
# The runner's engine settings, so the server's steps are the reference's.
SERVE_ARGS = [
    "--dtype", "bfloat16", "--block-size", "128", "--max-model-len", "256",
    "--max-num-batched-tokens", "64", "--max-num-seqs", "8",
    "--kv-cache-memory-bytes", str(32 << 20), "--seed", "0",
    "-cc.cudagraph_capture_sizes", json.dumps(CAPTURE_SIZES),
    "--data-parallel-size", "2", "--enable-expert-parallel",
    # EPLB with 2 redundant experts (10 physical, 5 a rank), rebalancing every 6 steps
    # over a 4-step load window: the ids tests below run across rebalances.
    "--enable-eplb", "--eplb-config", json.dumps(
        {"num_redundant_experts": 2, "window_size": 4, "step_interval": 6,
         "log_balancedness": True}),
    # Each worker's EPLB state on request (the test's, with VLLM_SERVER_DEV_MODE).
    "--worker-extension-cls", "integration.npu.npu_eplb_run.EplbViews",
]


def _env() -> dict[str, str]:
    env = child_env(dict(os.environ), soc_name=A3, device_count=2)
    for key in ("VLLM_ASCEND_MOE_COMM_METHOD", "VLLM_ENABLE_V1_MULTIPROCESSING"):
        env.pop(key, None)
    env["VLLM_ASCEND_DEVICE"] = "npu"
    env["OMP_NUM_THREADS"] = "1"
    env["VLLM_SERVER_DEV_MODE"] = "1"  # the collective_rpc endpoint, for EplbViews
    return env


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def model() -> str:
    return str(make_model(MODELS_DIR / "npu-ep-qwen3_moe", "qwen3_moe", "npu-ep"))


@pytest.fixture(scope="module")
def reference(model: str) -> Iterator[subprocess.Popen[str]]:
    """TP 1 eager on one emulated NPU, started first so it loads beside the server."""
    env = child_env(dict(os.environ), soc_name=A3, device_count=1)
    env.pop("VLLM_ASCEND_MOE_COMM_METHOD", None)
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.Popen([sys.executable, str(RUNNER), model, "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


@pytest.fixture(scope="module")
def server(
    model: str, reference: subprocess.Popen[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    import httpx

    port = _port()
    log_path = tmp_path_factory.mktemp("log") / "serve-dp-ep.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [str(_VENV_BIN / "vllm"), "serve", model, "--host", "127.0.0.1", "--port",
             str(port), *SERVE_ARGS, "--shutdown-timeout", "10"],
            env=_env(), stdout=log, stderr=subprocess.STDOUT, cwd=_REPO,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 900
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{log_path.read_text()[-6000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"server not ready:\n{log_path.read_text()[-6000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        served = {"url": url, "log": log_path, "model": model,
                  "views": tmp_path_factory.mktemp("eplb-views")}
        served["start"] = _views(served)
        yield served
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def reference_ids(reference: subprocess.Popen[str], server: dict[str, Any]) -> dict[str, Any]:
    out, _ = reference.communicate(timeout=900)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert reference.returncode == 0 and lines, out[-6000:]
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


def _complete(server: dict[str, Any], batch: list[list[int]]) -> list[list[int]]:
    """Each prompt's greedy ids, all sent at once (the DP ranks share them)."""
    import httpx

    def one(prompt: list[int]) -> list[int]:
        body = {"model": server["model"], "prompt": prompt, "max_tokens": MAX_NEW,
                "temperature": 0.0, "ignore_eos": True, "return_token_ids": True}
        reply = httpx.post(f"{server['url']}/v1/completions", json=body, timeout=300)
        assert reply.status_code == 200, reply.text
        ids: list[int] = reply.json()["choices"][0]["token_ids"]
        return ids

    with ThreadPoolExecutor(len(batch)) as pool:
        return list(pool.map(one, batch))


def _views(server: dict[str, Any]) -> list[dict[str, Any]]:
    """Each EP rank's EPLB state and expert fingerprints (npu_eplb_run.eplb_view): both
    engine cores' workers run the call and write their view to a fresh directory."""
    import httpx

    where = server["views"] / str(len(list(server["views"].iterdir())))
    where.mkdir()
    reply = httpx.post(f"{server['url']}/collective_rpc", timeout=120,
                       json={"method": "write_eplb_view", "args": [str(where)]})
    assert reply.status_code == 200, reply.text
    return [json.loads((where / f"rank-{rank}.json").read_text()) for rank in range(EP_RANKS)]


def _placement_follows_the_map(server: dict[str, Any], when: str) -> int:
    """Both ranks hold the same map and every slot the weights of the logical expert it
    names (the start-up fingerprints through the map); how many slots moved."""
    views = _views(server)
    maps = [view["physical_to_logical"] for view in views]
    assert maps[0] == maps[1], maps
    assert all(len(layer) == 10 for layer in maps[0]), maps  # 8 logical + 2 redundant
    moved = weights_follow_the_map(server["start"], views, when)
    print(f"{when}: map {maps[0]}, {moved} slots hold another expert than at start-up")
    return moved


def _rebalances(log: str) -> tuple[int, int]:
    """(rebalances begun, rebalances done) while serving, in a stretch of the log."""
    return log.count(_REBALANCE), len(_REBALANCED.findall(log))


def _routed(model: str, tokens: int) -> int:
    """Expert choices the model's MoE layers make for `tokens` tokens."""
    config = json.loads((Path(model) / "config.json").read_text())
    return tokens * int(config["num_experts_per_tok"]) * int(config["num_hidden_layers"])


def _across_a_rebalance(
    server: dict[str, Any], batch: list[list[int]]
) -> tuple[list[list[int]], list[float]]:
    """_complete, with at least one EPLB rebalance begun and done while the batch was
    served (the step counter runs on: 6 steps a rebalance, each batch takes more), and
    each of its steps' expert load recorded over the EP ranks."""
    start = len(server["log"].read_text())
    ids = _complete(server, batch)
    # Every token the batch computed: its prompt and each new token but the last.
    want = _routed(server["model"], sum(len(p) + MAX_NEW - 1 for p in batch))
    deadline = time.monotonic() + 10  # the last step's log line may trail its reply
    while True:
        log = server["log"].read_text()[start:]
        loads = [float(avg) * EP_RANKS for avg in _LOAD.findall(log)]
        if sum(loads) >= want or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    begun, done = _rebalances(log)
    print(f"rebalances while serving: {begun}; load a step: {loads}")
    assert begun >= 1 and done >= 1, (begun, done)
    assert sum(loads) == want, (sum(loads), want, loads)
    return ids, loads


def _partings(
    ids: list[list[int]], want: list[list[int]], top2: list[Any]
) -> tuple[list[str], list[str]]:
    """(every parting with the reference's top-2 gap, those at no near-tie)."""
    every, loud = [], []
    for seq, (got, ref) in enumerate(zip(ids, want, strict=True)):
        assert len(got) == len(ref) == MAX_NEW, (got, ref)
        step = next((j for j, (a, b) in enumerate(zip(got, ref, strict=True)) if a != b), None)
        if step is None:
            continue
        first, second = top2[seq][step]
        what = f"prompt {seq} step {step}: {got[step]} for {ref[step]} (gap {first - second:.3f})"
        every.append(what)
        if first - second >= NEAR_TIE_NATS:
            loud.append(what)
    print("partings:", every or "none")
    return every, loud


def test_chunked_prefills_and_decodes_give_the_single_device_ids(server, reference_ids) -> None:  # type: ignore[no-untyped-def]
    """Prompts of 5 to 90 tokens (chunked prefill, mixed steps, all-to-all above MC2's
    capacity) and the decode steps after them."""
    ids, _ = _across_a_rebalance(server, prompts())
    # The rebalance changed the start-up placement and moved weights to follow it.
    assert _placement_follows_the_map(server, "after the prompts") > 0
    _, loud = _partings(ids, reference_ids["ids"], reference_ids["top2"])
    assert not loud, loud


def test_decode_batches_give_the_single_device_ids(server, reference_ids) -> None:  # type: ignore[no-untyped-def]
    """One-token prompts: every step a uniform decode step on each rank, replayed from a
    captured graph with MC2 inside, the ranks padded to the same size."""
    ids, loads = _across_a_rebalance(server, decode_prompts())
    # Each rank pads its share to a captured size (4): a padding row counted would
    # show above the batch's 4 tokens a step.
    assert max(loads) == _routed(server["model"], len(decode_prompts())), loads
    _placement_follows_the_map(server, "after the decode batch")
    _, loud = _partings(ids, reference_ids["decode_ids"], reference_ids["decode_top2"])
    assert not loud, loud


def test_each_dp_rank_captures_the_plans_graphs_with_mc2_inside(server) -> None:  # type: ignore[no-untyped-def]
    log = server["log"].read_text()
    captured = _CAPTURED.findall(log)
    assert len(captured) == 2, log[-4000:]  # one line per DP rank's worker
    for mode, sizes in captured:
        assert mode == "FULL_AND_PIECEWISE"
        assert [int(s) for s in sizes.split(",")] == sorted(CAPTURE_SIZES)
    # Each rank's two MoE layers: the captured steps exchange by MC2 inside the graphs.
    inside = "captured steps (up to 8 tokens) exchange by mc2 inside the graphs"
    assert log.count(inside) >= 4, log[-4000:]
    assert "data parallel 2 with expert parallelism and TP 1 a DP rank keeps" in log
