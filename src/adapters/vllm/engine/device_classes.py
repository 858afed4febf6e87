"""The core's WorkerKind mapped to the (worker, model runner) pair serving it, by path.

Paths, not classes: vLLM imports the worker in each worker process, and the worker
imports its runner, so nothing heavy is imported where the platform only plans.
"""

from __future__ import annotations

from attrs import frozen

from ascend_core.plan import WorkerKind


@frozen
class DeviceClasses:
    worker: str  # module.Class, as vLLM's worker_cls takes it
    runner: str  # module:Class, on vLLM's V1 model runner
    runner_v2: str | None = None  # module:Class on vLLM's V2 runner; None: V1 only


DEVICE_CLASSES: dict[WorkerKind, DeviceClasses] = {
    WorkerKind.HOST: DeviceClasses(
        "adapters.vllm.worker.worker.HostWorker",
        "adapters.vllm.worker.host_model_runner:HostModelRunner",
    ),
    WorkerKind.NPU: DeviceClasses(
        "adapters.vllm.worker.worker.NpuWorker",
        "adapters.vllm.worker.npu_model_runner:NpuModelRunner",
        "adapters.vllm.worker.npu_model_runner_v2:NpuModelRunnerV2",
    ),
}
