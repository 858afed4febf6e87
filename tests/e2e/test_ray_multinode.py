"""Multi-node serving on Ray: a two-node Ray cluster on loopback (Ray's own test cluster,
one GCS and two raylets, each node with its own resources) stands in for two machines.

Node A (the head, where the engine runs) holds 1 CPU; node B holds 1 CPU and 2 NPUs (Ray's
NPU resource, declared: the NPUs are emulated). On the host device each worker holds one
Ray CPU, so TP=2 and PP=2 put one worker on each node; on the emulated NPU both workers
land on node B, Ray sets ASCEND_RT_VISIBLE_DEVICES to each one's own NPU, and each worker
process sees one device (as on an NPU host) and computes on it. Greedy ids equal TP=1's.
An emulator and one machine: nothing here proves HCCL across machines.

Cost: one driver process per device kind, each running its engines one after another (the
TP=1 reference without Ray, then each Ray engine). Measured on the shared 2-core machine
under a load average of about 60: the host fixture 282 s, the NPU fixture 344 s (a Ray
worker's start is an import of vLLM and torch; the host kernels' first build counts too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.hf_reference import local_model

pytestmark = [pytest.mark.e2e, pytest.mark.vllm]

ray = pytest.importorskip("ray", reason="the `ray` extra is not installed")

DRIVER = Path(__file__).with_name("ray_run.py")
STORE_BYTES = 100 << 20  # Ray's object store per node: vLLM's workers barely use it
_RUN_SECONDS = 900


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in ("RAY_USAGE_STATS_ENABLED", "RAY_ADDRESS")}
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ.pop("RAY_ADDRESS", None)
    node = {"object_store_memory": STORE_BYTES, "include_dashboard": False}
    c = Cluster(initialize_head=True, head_node_args={**node, "num_cpus": 1})
    c.add_node(**node, num_cpus=1, resources={"NPU": 2})
    c.wait_for_nodes()
    try:
        yield c
    finally:
        c.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _drive(device: str, address: str, *cases: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "RAY_ADDRESS")}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    done = subprocess.run(
        [sys.executable, str(DRIVER), device, str(local_model("llama", "tiny")), address,
         *cases],
        env=env,
        capture_output=True,
        text=True,
        timeout=_RUN_SECONDS,
    )
    tail = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, tail
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, tail
    result: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
    return result


@pytest.fixture(scope="module")
def host(cluster: Any) -> dict[str, Any]:
    return _drive("host", cluster.address, "tp1", "ray-tp2", "ray-pp2")


@pytest.fixture(scope="module")
def npu(cluster: Any) -> dict[str, Any]:
    return _drive("npu", cluster.address, "tp1", "ray-tp2")


def _nodes(cluster: Any) -> dict[str, str]:
    """node id -> "A" (the head) or "B"."""
    head = cluster.head_node.node_id
    return {n.node_id: ("A" if n.node_id == head else "B") for n in cluster.list_all_nodes()}


@pytest.mark.parametrize("case", ["ray-tp2", "ray-pp2"])
def test_host_workers_on_two_nodes_give_the_tp1_ids(host, cluster, case) -> None:
    run = host[case]
    assert run["executor"] == "RayExecutorV2" and run["backend"] == "ray"
    nodes = _nodes(cluster)
    assert sorted(nodes[w["node"]] for w in run["workers"]) == ["A", "B"]
    assert {w["worker"] for w in run["workers"]} == {"HostWorker"}
    assert run["ids"] == host["tp1"]["ids"]


def test_each_emulated_npu_worker_computes_on_the_npu_ray_reserved_for_it(npu, cluster) -> None:
    run = npu["ray-tp2"]
    assert run["executor"] == "RayExecutorV2"
    workers = sorted(run["workers"], key=lambda w: w["rank"])
    nodes = _nodes(cluster)
    assert [nodes[w["node"]] for w in workers] == ["B", "B"]  # the node with the NPUs
    assert [w["local_rank"] for w in workers] == [0, 1]
    # Each worker: its own NPU from Ray, that one alone visible, computed on as npu:0.
    reserved = [w["reserved_npu"] for w in workers]
    assert sorted(reserved) == [["0"], ["1"]]
    assert [w["visible"] for w in workers] == [r[0] for r in reserved]
    assert [w["device"] for w in workers] == ["npu:0", "npu:0"]
    assert all(w["kv_caches"] == ["npu"] and w["worker"] == "NpuWorker" for w in workers)
    assert len({w["pid"] for w in workers}) == 2
    assert run["ids"] == npu["tp1"]["ids"]
