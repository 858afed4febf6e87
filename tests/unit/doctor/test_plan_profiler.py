"""`plan` with --profiler-config: the doctor says what serves vLLM's torch profiler on the
target, and refuses, with the reason, what the device cannot honour."""

from __future__ import annotations

from typing import Any

from adapters.doctor.plan_command import plan_report
from adapters.doctor.report import Report
from adapters.doctor.serve_args import ServeArgs
from ascend_core.preflight import CheckStatus
from unit.doctor.large_models import LLAMA_70B_CONFIG, llama_70b_headers
from unit.doctor.test_plan_kv_cache_bytes import A2
from unit.fakes.environment import FakeEnvironment
from unit.fakes.model_files import FakeModelFiles
from unit.fakes.upstream import FakeUpstream


def _plan_items(profiler: dict[str, Any]) -> list[Any]:
    args = ServeArgs.from_parsed(
        {"model": "/m/llama", "tensor_parallel_size": 4, "gpu_memory_utilization": 0.9,
         "profiler_config": profiler}
    )  # fmt: skip
    files = FakeModelFiles({"config.json": dict(LLAMA_70B_CONFIG)}, llama_70b_headers(), "/m/llama")
    upstream = FakeUpstream({"vllm": "0.33.0", "torch": "2.13.0"})
    report: Report = plan_report(args, files, FakeEnvironment({}), upstream, A2)
    return next(s for s in report.sections if s.title == "config plan").items


def test_the_torch_profiler_is_served_by_torch_npus_profiler() -> None:
    items = _plan_items({"profiler": "torch", "torch_profiler_dir": "/traces"})
    assert not [i for i in items if i.status is CheckStatus.FAIL]
    served = [i.detail for i in items if i.name == "serves"]
    assert any("torch profiler" in d and "torch_npu's profiler" in d for d in served), served
    assert any("/traces" in i.detail and "NPU's kernels" in i.detail for i in items)


def test_the_cuda_profiler_and_a_cuda_activity_are_refused_with_the_reason() -> None:
    items = _plan_items({"profiler": "cuda"})
    failed = [i for i in items if i.status is CheckStatus.FAIL]
    assert any("cudaProfilerStart" in i.detail for i in failed), items
    items = _plan_items(
        {"profiler": "torch", "torch_profiler_dir": "/t", "torch_profiler_activities": ["CUDA"]}
    )
    failed = [i for i in items if i.status is CheckStatus.FAIL]
    assert any("CUDA" in i.detail and "PrivateUse1" in i.detail for i in failed), items
