"""The host's profiler: torch's profiler on the CPU activity, a chrome trace per session."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import torch

from ports.profiler import DeviceProfiler, ProfiledActivity, ProfileRequest


class HostProfiler(DeviceProfiler):
    """torch.profiler.profile over the host's ops (aten ops and the plugin's host ops).

    Each session writes `{trace_dir}/{worker_name}.{time_ns}.pt.trace.json[.gz]`, the
    name torch's tensorboard_trace_handler gives, so TensorBoard and Perfetto read it.
    """

    def __init__(self) -> None:
        self._profile: Any = None
        self._written: str | None = None

    def start(self, request: ProfileRequest) -> None:
        if self._profile is not None:
            raise RuntimeError("a profiling session is already running; stop it first")
        if ProfiledActivity.DEVICE in request.activities:
            raise ValueError(
                "the host device has no device activity to record; profile it with the "
                "CPU activity (torch_profiler_activities unset or [CPU])"
            )
        os.makedirs(request.trace_dir, exist_ok=True)
        suffix = ".pt.trace.json.gz" if request.use_gzip else ".pt.trace.json"
        self._written = None

        def write(profile: Any) -> None:
            path = os.path.join(
                request.trace_dir, f"{request.worker_name}.{time.time_ns()}{suffix}"
            )
            profile.export_chrome_trace(path)
            self._written = path

        schedule = request.schedule
        self._profile = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            schedule=torch.profiler.schedule(
                wait=schedule.wait, warmup=schedule.warmup, active=schedule.active, repeat=1
            )
            if schedule is not None
            else None,
            record_shapes=request.record_shapes,
            profile_memory=request.profile_memory,
            with_stack=request.with_stack,
            with_flops=request.with_flops,
            on_trace_ready=write,
        )
        self._profile.start()

    def step(self) -> None:
        if self._profile is not None:
            self._profile.step()

    def stop(self) -> str | None:
        if self._profile is None:
            raise RuntimeError("no profiling session is running; start one first")
        profile, self._profile = self._profile, None
        profile.stop()
        return self._written

    def annotate(self, name: str) -> contextlib.AbstractContextManager[None]:
        if self._profile is None:
            return contextlib.nullcontext()
        return torch.profiler.record_function(name)
