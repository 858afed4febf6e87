"""The NPU's profiler: torch_npu.profiler (2.14.0's API), the host's ops and the NPU's kernels.

Each session writes torch_npu's own layout: `{trace_dir}/{worker}_{pid}_{time}_ascend_pt/`
with its raw data and, once analysed, ASCEND_PROFILER_OUTPUT/ (trace_view.json,
kernel_details.csv, ...), which MindStudio Insight and TensorBoard's Ascend plugin read.
"""

from __future__ import annotations

import contextlib
import glob
import os
from types import ModuleType
from typing import Any

import torch

from ports.profiler import DeviceProfiler, ProfiledActivity, ProfileRequest


class NpuProfiler(DeviceProfiler):
    """torch_npu.profiler.profile with the options a vLLM profiler config carries.

    The choices vLLM's config has no field for are those the reference plugin makes:
    level 1 (CANN and AscendCL events with the kernels), the AI Core pipe utilisation
    metrics, the text export, and the analysis run apart from the worker (async_mode),
    since parsing a trace takes tens of seconds. `with_stack` asks torch_npu for
    `with_modules` (the Python module hierarchy): its per-op stack capture costs too
    much time on the NPU. torch_npu has no gzip option (use_gzip does not apply).
    """

    def __init__(self, torch_npu: ModuleType) -> None:
        self._torch_npu = torch_npu
        self._profile: Any = None
        self._request: ProfileRequest | None = None

    def start(self, request: ProfileRequest) -> None:
        if self._profile is not None:
            raise RuntimeError("a profiling session is already running; stop it first")
        activity = self._torch_npu.profiler.ProfilerActivity
        activities = []
        if ProfiledActivity.HOST in request.activities:
            activities.append(activity.CPU)
        if ProfiledActivity.DEVICE in request.activities:
            activities.append(activity.NPU)
        os.makedirs(request.trace_dir, exist_ok=True)
        schedule = request.schedule
        self._profile = self._torch_npu.profiler.profile(
            activities=activities,
            schedule=self._torch_npu.profiler.schedule(
                wait=schedule.wait, active=schedule.active, warmup=schedule.warmup, repeat=1
            )
            if schedule is not None
            else None,
            on_trace_ready=self._torch_npu.profiler.tensorboard_trace_handler(
                request.trace_dir, worker_name=request.worker_name, async_mode=True
            ),
            record_shapes=request.record_shapes,
            profile_memory=request.profile_memory,
            with_stack=False,
            with_modules=request.with_stack,
            with_flops=request.with_flops,
            experimental_config=self._torch_npu.profiler._ExperimentalConfig(
                profiler_level=self._torch_npu.profiler.ProfilerLevel.Level1,
                aic_metrics=self._torch_npu.profiler.AiCMetrics.PipeUtilization,
                export_type=self._torch_npu.profiler.ExportType.Text,
            ),
        )
        self._request = request
        self._profile.start()

    def step(self) -> None:
        if self._profile is not None:
            self._profile.step()

    def stop(self) -> str | None:
        if self._profile is None or self._request is None:
            raise RuntimeError("no profiling session is running; start one first")
        profile, self._profile = self._profile, None
        request, self._request = self._request, None
        profile.stop()
        # torch_npu names the session's directory itself: the newest of this process's.
        pattern = f"{request.worker_name}_{os.getpid()}_*_ascend_pt"
        found = sorted(glob.glob(os.path.join(request.trace_dir, pattern)), key=os.path.getmtime)
        return found[-1] if found else None

    def annotate(self, name: str) -> contextlib.AbstractContextManager[None]:
        if self._profile is None:
            return contextlib.nullcontext()
        # torch_npu's profiler records torch's record_function ranges (its own step
        # markers are record_function too).
        return torch.profiler.record_function(name)
