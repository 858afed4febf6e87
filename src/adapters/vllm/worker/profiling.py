"""vLLM's profiler hooks bound to the device profiler port (ports/profiler.py).

vLLM's GPU worker drives a `WorkerProfiler` (start/stop from /start_profile and
/stop_profile or LLM.start_profile/stop_profile, a step and an annotation per engine
iteration, delay_iterations and max_iterations); here that object delegates to the
container's DeviceProfiler: torch's profiler on the host, torch_npu's on an NPU.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import attrs
from vllm.profiler.wrapper import WorkerProfiler

from adapters.vllm.engine.translate import profiler_settings
from ascend_core.profiling import profile_request
from ports.device import DeviceKind
from ports.profiler import DeviceProfiler, ProfiledActivity, ProfileRequest

if TYPE_CHECKING:
    from vllm.config import ProfilerConfig, VllmConfig

logger = logging.getLogger("vllm.plugins.ascend")

# /start_profile's profiler_kwargs (torch.profiler.profile's arguments) a session can take.
_SESSION_KWARGS = {
    "record_shapes": "record_shapes",
    "profile_memory": "profile_memory",
    "with_stack": "with_stack",
    "with_flops": "with_flops",
}


class PortProfiler(WorkerProfiler):
    """vLLM's worker profiler lifecycle on the device profiler port."""

    def __init__(
        self, profiler_config: ProfilerConfig, device: DeviceProfiler, request: ProfileRequest
    ) -> None:
        super().__init__(profiler_config)
        self._device = device
        self._base = request
        self._request = request
        self._warmup_left = 0
        self.last_trace: str | None = None

    @property
    def request(self) -> ProfileRequest:
        """What the next (or the running) session records."""
        return self._request

    def set_output_name(self, worker_name: str) -> None:
        if not self._active:
            self._base = attrs.evolve(self._base, worker_name=worker_name)
            self._request = attrs.evolve(self._request, worker_name=worker_name)

    def set_profiler_kwargs(self, profiler_kwargs: dict[str, Any] | None) -> None:
        if self._active:
            return
        changes: dict[str, Any] = {}
        for key, value in (profiler_kwargs or {}).items():
            if key in _SESSION_KWARGS and isinstance(value, bool):
                changes[_SESSION_KWARGS[key]] = value
            else:
                logger.warning(
                    "/start_profile profiler_kwargs %s=%r is ignored: the device profiler "
                    "takes only %s (booleans).",
                    key,
                    value,
                    ", ".join(_SESSION_KWARGS),
                )
        self._request = attrs.evolve(self._base, **changes)

    def _start(self) -> None:
        schedule = self._request.schedule
        # The schedule's first step is taken by start (as vLLM's torch wrapper counts).
        self._warmup_left = max(schedule.wait + schedule.warmup - 1, 0) if schedule else 0
        self._device.start(self._request)

    def _stop(self) -> None:
        self.last_trace = self._device.stop()
        if self.last_trace is None:
            logger.warning(
                "Profiler stopped before its schedule recorded a step; no trace written."
            )
        else:
            logger.info("Profiler trace written to %s", self.last_trace)

    def _profiler_step(self) -> bool:
        if self._request.schedule is None:
            return True
        self._device.step()
        if self._warmup_left > 0:
            self._warmup_left -= 1
            return False
        return True

    @property
    def should_annotate(self) -> bool:
        return self._running and ProfiledActivity.HOST in self._request.activities

    def annotate_context_manager(self, name: str) -> contextlib.AbstractContextManager[None]:
        if not self.should_annotate:
            return contextlib.nullcontext()
        return self._device.annotate(name)


def worker_profiler(
    vllm_config: VllmConfig, device_kind: DeviceKind, device: DeviceProfiler
) -> PortProfiler | None:
    """The worker's profiler for its --profiler-config; None when profiling is off.

    The trace name is set by vLLM at each start (its rank suffix, the request's prefix).
    """
    settings = profiler_settings(vllm_config)
    if not settings.enabled:
        return None
    request = profile_request(settings, device_kind, "rank0")
    return PortProfiler(vllm_config.profiler_config, device, request)


@contextlib.contextmanager
def vllm_profiler_check_skipped(vllm_config: VllmConfig | None) -> Iterator[None]:
    """Around vLLM's Worker.__init__: its profiler check knows only the cuda, xpu and cpu
    device types and refuses the NPU's; the plan checked the config against the device
    (ascend_core.profiling), and the worker's profiler is the port's (worker_profiler)."""
    from vllm.config import ProfilerConfig

    if vllm_config is None:
        yield
        return
    asked = vllm_config.profiler_config
    vllm_config.profiler_config = ProfilerConfig()
    try:
        yield
    finally:
        vllm_config.profiler_config = asked
