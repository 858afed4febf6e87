"""The model runner: vLLM's CPU adaptation of its GPU model runner, unchanged in its math.

Attention and the custom ops are ours (selected by the platform); this class only
keeps the tensor bookkeeping on the host.
"""

from __future__ import annotations

from vllm.v1.worker.cpu_model_runner import CPUModelRunner

from ascend_core.errors import DeviceUnavailableError
from ports.runtime import DeviceRuntime


class HostModelRunner(CPUModelRunner):
    """vLLM's CPUModelRunner (GPUModelRunner with host buffers), without vLLM's compiled ops."""


def model_runner_for(runtime: DeviceRuntime) -> type[HostModelRunner]:
    """The runner for where the runtime keeps tensors.

    Only host tensors have a runner in this build: the host device, and the NPU
    adapter on an emulated torch_npu. A runner for tensors in NPU memory (device-side
    input buffers, NPU streams and graphs) is not written; nothing here has run on
    Ascend hardware.
    """
    if runtime.device_type == "cpu":
        return HostModelRunner
    raise DeviceUnavailableError(
        f"This build has no model runner for tensors on {runtime.device_type!r} devices; "
        "only host tensors are served (the host device, or the NPU adapter on an "
        "emulated torch_npu).",
        "serve with VLLM_ASCEND_DEVICE=cpu",
    )
