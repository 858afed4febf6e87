"""torch_npu.profiler (2.14.0's torch_npu/profiler/) on the emulated NPU.

The names and signatures are the wheel's: profile, ProfilerActivity, schedule,
ProfilerAction, tensorboard_trace_handler, _ExperimentalConfig, ProfilerLevel, AiCMetrics,
ExportType, supported_activities. A session records what the real one records, as far
as an emulator can: with the CPU activity, torch's profiler over the host's ops (the
torch_npu ops among them as `npu::NAME` ranges, the names they have in torch_npu's
dispatcher); with the NPU activity, each torch_npu op launched on the emulated device as
a kernel named as CANN names it (npu_rms_norm -> RmsNorm). Its files follow the wheel's
layout: `{dir}/{worker}_{pid}_{time}_ascend_pt/` with profiler_info.json and, once
analysed, ASCEND_PROFILER_OUTPUT/trace_view.json (chrome trace) and kernel_details.csv.
The kernels of a captured graph's replays are recorded too (no host range: a replay
launches nothing from the host). Differences, stated: the analysis runs at once even with
async_mode=True (the wheel parses in a subprocess); nothing of CANN, AscendCL or the AI
Core metrics is recorded.
"""

from __future__ import annotations

import csv
import enum
import json
import os
import socket
import tempfile
import time
import types
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

import torch

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"  # analysis/prof_common_func/_constant.py
TRACE_VIEW = "trace_view.json"
KERNEL_DETAILS = "kernel_details.csv"
# OP_SUMMARY_KERNEL_BASE_HEADERS of _csv_headers.py
KERNEL_HEADERS = [
    "Device_id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)",
    "Wait Time(us)", "Block Num",
]  # fmt: skip


class ProfilerActivity(enum.Enum):
    CPU = 0
    NPU = 1


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


class ProfilerLevel:
    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"
    Level_none = "Level_none"


class AiCMetrics:
    PipeUtilization = "ACL_AICORE_PIPE_UTILIZATION"
    ArithmeticUtilization = "ACL_AICORE_ARITHMETIC_UTILIZATION"
    Memory = "ACL_AICORE_MEMORY_BANDWIDTH"
    MemoryL0 = "ACL_AICORE_L0B_AND_WIDTH"
    MemoryUB = "ACL_AICORE_MEMORY_UB"
    ResourceConflictRatio = "ACL_AICORE_RESOURCE_CONFLICT_RATIO"
    L2Cache = "ACL_AICORE_L2_CACHE"
    MemoryAccess = "ACL_AICORE_MEMORY_ACCESS"
    AiCoreNone = "ACL_AICORE_NONE"


class ExportType:
    Db = "db"
    Text = "text"


def supported_activities() -> set[ProfilerActivity]:
    return {ProfilerActivity.CPU, ProfilerActivity.NPU}


class _ExperimentalConfig:
    """The wheel's keyword arguments and defaults; kept, not acted on (no CANN here)."""

    def __init__(
        self,
        profiler_level: str = ProfilerLevel.Level0,
        aic_metrics: str = AiCMetrics.PipeUtilization,
        l2_cache: bool = False,
        msprof_tx: bool = False,
        mstx: bool = False,
        data_simplification: bool = True,
        record_op_args: bool = False,
        op_attr: bool = False,
        gc_detect_threshold: float | None = None,
        export_type: str | list[str] = ExportType.Text,
        host_sys: list[str] | None = None,
        mstx_domain_include: list[str] | None = None,
        mstx_domain_exclude: list[str] | None = None,
        sys_io: bool = False,
        sys_interconnection: bool = False,
    ) -> None:
        if profiler_level not in vars(ProfilerLevel).values():
            raise ValueError(f"profiler_level {profiler_level!r} is not a ProfilerLevel")
        self._profiler_level = profiler_level
        self._aic_metrics = aic_metrics
        self._l2_cache = l2_cache
        self._msprof_tx = msprof_tx or mstx
        self._data_simplification = data_simplification
        self.record_op_args = record_op_args
        self._op_attr = op_attr
        self._gc_detect_threshold = gc_detect_threshold
        self._export_type = [export_type] if isinstance(export_type, str) else list(export_type)


class Schedule:
    """scheduler.Schedule: skip_first, then cycles of wait / warmup / active steps."""

    def __init__(
        self,
        wait: int,
        active: int,
        warmup: int = 0,
        repeat: int = 0,
        skip_first: int = 0,
        skip_first_wait: int = 0,
    ) -> None:
        self.wait, self.active, self.warmup = wait, max(1, active), warmup
        self.repeat, self.skip_first, self.skip_first_wait = repeat, skip_first, skip_first_wait

    def __call__(self, step: int) -> ProfilerAction:
        if step < self.skip_first:
            return ProfilerAction.NONE
        step -= self.skip_first
        if self.skip_first_wait:
            step += self.wait
        cycle = self.wait + self.warmup + self.active
        if self.repeat > 0 and step / cycle >= self.repeat:
            return ProfilerAction.NONE
        at = step % cycle
        if at < self.wait:
            return ProfilerAction.NONE
        if at < self.wait + self.warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if at < cycle - 1 else ProfilerAction.RECORD_AND_SAVE


def _default_schedule(_: int) -> ProfilerAction:
    return ProfilerAction.RECORD


def kernel_name(op: str) -> str:
    """The CANN kernel a torch_npu op launches, as the device trace names it."""
    return "".join(part.capitalize() for part in op.removeprefix("npu_").split("_") if part)


class _Session:
    """One recording (the wheel's _ProfInterface): its directory, host and NPU events."""

    def __init__(self, owner: Any, prof: profile, dir_name: str | None, worker: str | None) -> None:
        self.owner, self.prof = owner, prof
        base = os.path.abspath(dir_name) if dir_name else os.getcwd()
        stamp = datetime.now(tz=timezone.utc).astimezone().strftime("%Y%m%d%H%M%S%f")[:-3]
        name = f"{worker or socket.gethostname()}_{os.getpid()}_{stamp}_ascend_pt"
        self.path = os.path.join(base, name)
        os.makedirs(self.path, exist_ok=True)
        self.kernels: list[tuple[str, int, int]] = []  # (kernel, start ns, duration ns)
        self.host: Any = None
        self.host_events: list[dict[str, Any]] = []

    def start(self) -> None:
        if ProfilerActivity.CPU in self.prof.activities:
            self.host = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU],
                record_shapes=self.prof.record_shapes,
                profile_memory=self.prof.profile_memory,
                with_stack=self.prof.with_stack,
                with_flops=self.prof.with_flops,
                with_modules=self.prof.with_modules,
            )
            self.host.start()
        self.owner._profiling.append(self)

    def record_kernel(self, op: str, start_ns: int, duration_ns: int) -> None:
        if ProfilerActivity.NPU in self.prof.activities:
            self.kernels.append((kernel_name(op), start_ns, duration_ns))

    def stop(self) -> None:
        if self in self.owner._profiling:
            self.owner._profiling.remove(self)
        if self.host is not None:
            self.host.stop()
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "host.json")
                self.host.export_chrome_trace(path)
                with open(path) as f:
                    self.host_events = list(json.load(f).get("traceEvents", []))
            self.host = None
        info = {
            "config": {
                "common_config": {
                    "activities": [str(a) for a in self.prof.activities],
                    "record_shapes": self.prof.record_shapes,
                    "profile_memory": self.prof.profile_memory,
                    "with_stack": self.prof.with_stack,
                    "with_flops": self.prof.with_flops,
                    "with_modules": self.prof.with_modules,
                },
                "experimental_config": vars(self.prof.experimental_config)
                if self.prof.experimental_config is not None
                else None,
            },
            "torch_npu_version": self.owner.__version__,
            "emulated": True,
        }
        with open(os.path.join(self.path, "profiler_info.json"), "w") as f:
            json.dump(info, f, indent=4)

    def analyse(self) -> None:
        """ASCEND_PROFILER_OUTPUT: the trace view (host ops and NPU kernels) and the
        kernel details."""
        out = os.path.join(self.path, OUTPUT_DIR)
        os.makedirs(out, exist_ok=True)
        hardware_pid = 2**31 - 1
        events = [
            *self.host_events,
            {"ph": "M", "name": "process_name", "pid": hardware_pid,
             "args": {"name": "Ascend Hardware"}},
            *(
                {"ph": "X", "name": k, "cat": "kernel", "pid": hardware_pid, "tid": 0,
                 "ts": start / 1000, "dur": dur / 1000, "args": {"Task Type": "AI_CORE"}}
                for k, start, dur in self.kernels
            ),
        ]  # fmt: skip
        with open(os.path.join(out, TRACE_VIEW), "w") as f:
            json.dump(events, f)
        with open(os.path.join(out, KERNEL_DETAILS), "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(KERNEL_HEADERS)
            for k, start, dur in self.kernels:
                writer.writerow([0, k, k, "AI_CORE", start / 1000, dur / 1000, 0, 1])


def tensorboard_trace_handler(
    dir_name: str | None = None,
    worker_name: str | None = None,
    analyse_flag: bool = True,
    async_mode: bool = False,
) -> Callable[[Any], None]:
    def handler_fn(prof_inst: Any) -> None:
        if analyse_flag and prof_inst._session is not None:
            prof_inst._session.analyse()

    handler_fn._dir_name = dir_name  # type: ignore[attr-defined]
    handler_fn._worker_name = worker_name  # type: ignore[attr-defined]
    return handler_fn


def make_profiler(owner: Any) -> types.ModuleType:
    """torch_npu.profiler for one emulated torch_npu (its op launches feed the sessions)."""
    module = types.ModuleType("torch_npu.profiler")

    class _Profile(profile):
        _owner = owner

    _Profile.__name__ = "profile"
    module.profile = _Profile  # type: ignore[attr-defined]
    for name, value in {
        "ProfilerActivity": ProfilerActivity,
        "ProfilerAction": ProfilerAction,
        "ProfilerLevel": ProfilerLevel,
        "AiCMetrics": AiCMetrics,
        "ExportType": ExportType,
        "_ExperimentalConfig": _ExperimentalConfig,
        "schedule": Schedule,
        "tensorboard_trace_handler": tensorboard_trace_handler,
        "supported_activities": supported_activities,
    }.items():
        setattr(module, name, value)
    return module


class profile:
    """torch_npu.profiler.profile: the wheel's keyword arguments; start/step/stop drive
    the same actions as its ProfActionController."""

    _owner: Any = None

    def __init__(
        self,
        *,
        activities: Iterable[ProfilerActivity] | None = None,
        schedule: Callable[[int], ProfilerAction] | None = None,
        on_trace_ready: Callable[..., Any] | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        experimental_config: _ExperimentalConfig | None = None,
        execution_trace_observer: Any = None,
        custom_trace_id_callback: Callable[[], str] | None = None,
        use_cuda: bool | None = None,
    ) -> None:
        self.activities = set(activities) if activities else supported_activities()
        unknown = [a for a in self.activities if not isinstance(a, ProfilerActivity)]
        if unknown:
            raise TypeError(f"activities must be torch_npu.profiler.ProfilerActivity: {unknown}")
        self.schedule = schedule or _default_schedule
        self.on_trace_ready = on_trace_ready
        self.record_shapes, self.profile_memory = record_shapes, profile_memory
        self.with_stack, self.with_flops, self.with_modules = with_stack, with_flops, with_modules
        self.experimental_config = experimental_config
        self.step_num = 0
        self.current_action = self.schedule(0)
        self._session: _Session | None = None
        self.stopped = False

    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _new_session(self) -> None:
        handler = self.on_trace_ready
        self._session = _Session(
            self._owner,
            self,
            getattr(handler, "_dir_name", None),
            getattr(handler, "_worker_name", None),
        )

    def _transit(self, prev: ProfilerAction | None, cur: ProfilerAction | None) -> None:
        recording = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
        if prev in (None, ProfilerAction.NONE) and cur in (ProfilerAction.WARMUP, *recording):
            self._new_session()
        if cur in recording and prev not in recording:
            assert self._session is not None
            self._session.start()
        if prev in recording and (cur not in recording or prev is ProfilerAction.RECORD_AND_SAVE):
            assert self._session is not None
            self._session.stop()
            ready = prev is ProfilerAction.RECORD_AND_SAVE or cur is None
            if ready and self.on_trace_ready is not None:
                self.on_trace_ready(self)
            if cur in (ProfilerAction.WARMUP, *recording):
                self._new_session()
                if cur in recording:
                    self._session.start()  # type: ignore[union-attr]
        if prev is ProfilerAction.WARMUP and cur is None and self._session is not None:
            # Stopped while warming up: the wheel deletes the empty directory.
            os.rmdir(self._session.path)
            self._session = None

    def start(self) -> None:
        self.stopped = False
        self._transit(ProfilerAction.NONE, self.current_action)

    def step(self) -> None:
        if self.stopped:
            return
        prev = self.current_action
        self.step_num += 1
        self.current_action = self.schedule(self.step_num)
        self._transit(prev, self.current_action)

    def stop(self) -> None:
        self._transit(self.current_action, None)
        self.stopped = True


def replay_recorder(
    owner: Any, name: str, run: Callable[[str, dict[str, Any]], Any]
) -> Callable[[str, dict[str, Any]], Any]:
    """`run` as a captured graph replays it: the kernel of each replay, for the sessions
    recording then (a replay launches nothing from the host: no `npu::` range)."""

    def replay(overload: str, values: dict[str, Any]) -> Any:
        if not owner._profiling:
            return run(overload, values)
        start = time.time_ns()
        result = run(overload, values)
        duration = time.time_ns() - start
        for session in list(owner._profiling):
            session.record_kernel(name, start, duration)
        return result

    return replay


def profiled_launch(owner: Any, name: str, launch: Callable[[], Any]) -> Any:
    """One op launch while sessions record: a host range `npu::NAME` (what torch_npu's
    dispatcher op is called) and, for the NPU activity, the kernel it runs."""
    start = time.time_ns()
    with torch.profiler.record_function(f"npu::{name}"):
        result = launch()
    duration = time.time_ns() - start
    for session in list(owner._profiling):
        session.record_kernel(name, start, duration)
    return result
