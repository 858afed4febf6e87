"""vLLM's per-group graph-capture context, letting the NPU's device communicator in.

`GroupCoordinator.graph_capture` (vLLM 0.33) asserts that a group's device communicator
is CUDA's or XPU's, to enter their custom all-reduce's capture mode; with tensor
parallelism an NPU group holds NpuDeviceCommunicator and the assertion stops the capture.
The NPU has no such all-reduce to prepare: HCCL's collectives are launched on the
capturing stream and recorded there. For that communicator the context does the rest of
vLLM's: the capture stream waits for the current one, then becomes current. Every other
group (no communicator, one world) goes through vLLM's own, unchanged.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from adapters.vllm.patches._symbols import rebind_imported, resolve

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec


def let_npu_communicator_capture(spec: PatchSpec) -> None:
    original = resolve(spec.target)
    if getattr(original, "__ascend_patch__", None) == spec.id:
        return

    @functools.wraps(original)
    @contextlib.contextmanager
    def graph_capture(self: Any, graph_capture_context: Any = None) -> Iterator[Any]:
        from adapters.vllm.worker.communicator import NpuDeviceCommunicator

        if not isinstance(self.device_communicator, NpuDeviceCommunicator):
            with original(self, graph_capture_context) as context:
                yield context
            return
        import torch
        from vllm.distributed.parallel_state import GraphCaptureContext

        # torch.cuda here is the device's API: the runner captures inside the runtime's
        # runner_scope (adapters/vllm/worker/npu_model_runner.py), which binds these names.
        if graph_capture_context is None:
            graph_capture_context = GraphCaptureContext(torch.cuda.Stream())
        stream = graph_capture_context.stream
        current = torch.cuda.current_stream()
        if current != stream:
            stream.wait_stream(current)
        with torch.cuda.stream(stream):
            yield graph_capture_context

    graph_capture.__ascend_patch__ = spec.id  # type: ignore[attr-defined]
    rebind_imported(spec.target, spec.also_rebind, graph_capture)
