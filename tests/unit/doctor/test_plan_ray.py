"""`ascend-doctor plan` with --distributed-executor-backend ray: what Ray must provide, and
the placement checked against a cluster (a fake RayCluster port) when an address is given."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from adapters.doctor.cli import main
from unit.doctor.test_cli import _llama, wiring
from unit.fakes.ray_cluster import FakeRayCluster

RAY = ["--distributed-executor-backend", "ray", "--tensor-parallel-size", "8"]


def parse(argv: Sequence[str]) -> Mapping[str, Any]:
    names = {"--tensor-parallel-size": "tensor_parallel_size",
             "--pipeline-parallel-size": "pipeline_parallel_size",
             "--distributed-executor-backend": "distributed_executor_backend"}
    parsed: dict[str, Any] = {"model": argv[0], "gpu_memory_utilization": 0.9}
    for flag, value in zip(argv[1::2], argv[2::2], strict=True):
        parsed[names[flag]] = value if flag.endswith("backend") else int(value)
    return parsed


def plan(
    argv: list[str], ray: FakeRayCluster, env: Mapping[str, str] | None = None,
    doctor: Sequence[str] = (),
) -> tuple[int, dict[str, Any]]:
    c = wiring(env=env, files=_llama())
    c.serve_args_parser.override(parse)
    c.ray_cluster.override(ray)
    out = io.StringIO()
    code = main(["plan", "--json", *doctor, "--", *argv], c, out)
    return code, json.loads(out.getvalue())


def _section(report: dict[str, Any], title: str) -> list[dict[str, Any]]:
    return next(s["items"] for s in report["sections"] if s["title"] == title)


def test_without_an_address_the_plan_says_what_ray_needs_and_reads_no_cluster() -> None:
    ray = FakeRayCluster()
    code, report = plan(["/m/llama", *RAY, "--pipeline-parallel-size", "2"], ray)
    items = _section(report, "ray")
    assert report["data"]["ray"] == {"resource": "NPU", "workers": 16, "address": None}
    assert any("16 Ray worker(s) (TP=8 x PP=2)" in i["detail"] for i in items)
    assert any("--ray-address" in i["detail"] for i in items)
    assert ray.read_from == []
    assert code == 0
    # 16 devices on one probed node would fail the local device count; on Ray it does not.
    assert not any(i["status"] == "fail" for s in report["sections"] for i in s["items"]
                   if i["name"] == "devices")


def test_ray_address_places_the_workers_on_the_cluster() -> None:
    ray = FakeRayCluster({"10.0.0.1": {"NPU": 8.0}, "10.0.0.2": {"NPU": 8.0}})
    code, report = plan(["/m/llama", *RAY, "--pipeline-parallel-size", "2"], ray,
                        env={"RAY_ADDRESS": "10.0.0.1:6379"})
    assert ray.read_from == ["10.0.0.1:6379"]
    assert code == 0
    assert report["data"]["ray"]["fits"] is True
    assert report["data"]["ray"]["per_node"] == [["10.0.0.1", 8], ["10.0.0.2", 8]]


def test_a_cluster_that_cannot_place_the_workers_fails_the_plan() -> None:
    ray = FakeRayCluster({"10.0.0.1": {"NPU": 8.0}, "10.0.0.2": {"NPU": 8.0}},
                         dead=["10.0.0.2"])
    code, report = plan(["/m/llama", *RAY, "--pipeline-parallel-size", "2"], ray,
                        doctor=["--ray-address", "head:6379"])
    assert code == 2
    failed = [i for i in _section(report, "ray") if i["status"] == "fail"]
    assert len(failed) == 1 and "has 8 NPU on 1 alive node(s)" in failed[0]["detail"]
    assert "add 8 NPU(s)" in failed[0]["fix"]


def test_no_cluster_at_the_address_fails_with_the_fix() -> None:
    code, report = plan(["/m/llama", *RAY], FakeRayCluster(down=True),
                        doctor=["--ray-address", "nowhere:1"])
    assert code == 2
    failed = [i for i in _section(report, "ray") if i["status"] == "fail"]
    assert "cannot read the Ray cluster at nowhere:1" in failed[0]["detail"]
