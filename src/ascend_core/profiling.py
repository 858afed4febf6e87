"""vLLM's profiler config (--profiler-config) against the serving device: what is recorded,
and what is refused, with the reason.

The host records torch's CPU activity; an NPU records the host's ops and the NPU's
kernels through torch_npu's profiler (vLLM names an out-of-tree device's activity
`PrivateUse1`, which torch_npu is).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attrs import frozen

from ascend_core.errors import ConfigError
from ports.device import DeviceKind
from ports.profiler import ProfiledActivity, ProfileRequest, ProfileSchedule

__all__ = [
    "PROFILER_ACTIVITIES",
    "ProfilerSettings",
    "profile_request",
    "profiled_activities",
    "profiler_errors",
    "settings_from_mapping",
]

_ROOT = "--profiler-config"

# vLLM's activity names -> what each device records for them.
PROFILER_ACTIVITIES: dict[DeviceKind, dict[str, ProfiledActivity]] = {
    DeviceKind.CPU: {"CPU": ProfiledActivity.HOST},
    DeviceKind.NPU: {"CPU": ProfiledActivity.HOST, "PrivateUse1": ProfiledActivity.DEVICE},
}
_DEFAULT_ACTIVITIES: dict[DeviceKind, tuple[str, ...]] = {
    DeviceKind.CPU: ("CPU",),
    DeviceKind.NPU: ("CPU", "PrivateUse1"),
}
_WHERE = {DeviceKind.CPU: "the host device", DeviceKind.NPU: "an Ascend NPU"}


@frozen
class ProfilerSettings:
    """vLLM's ProfilerConfig, as plain data (the fields the plugin acts on)."""

    profiler: str | None = None  # "torch", "cuda", "proton"; None: profiling is off
    trace_dir: str = ""  # torch_profiler_dir
    activities: tuple[str, ...] | None = None  # torch_profiler_activities; None: default
    record_shapes: bool = False
    with_memory: bool = False
    with_stack: bool = True
    with_flops: bool = False
    use_gzip: bool = True
    capture_graphs: bool = False  # capture_torch_profiler
    wait_iterations: int = 0
    warmup_iterations: int = 0
    active_iterations: int = 5

    @property
    def enabled(self) -> bool:
        return self.profiler is not None


def settings_from_mapping(raw: Mapping[str, Any] | None) -> ProfilerSettings:
    """ProfilerSettings from vLLM's ProfilerConfig fields (its argparse/JSON names), as the
    doctor reads --profiler-config; missing fields take vLLM's defaults."""
    d = dict(raw or {})
    if d.get("profiler") is None:
        return ProfilerSettings()
    activities = d.get("torch_profiler_activities")
    defaults = ProfilerSettings()
    return ProfilerSettings(
        profiler=str(d["profiler"]),
        trace_dir=str(d.get("torch_profiler_dir") or ""),
        activities=tuple(str(a) for a in activities) if activities else None,
        record_shapes=bool(d.get("torch_profiler_record_shapes", defaults.record_shapes)),
        with_memory=bool(d.get("torch_profiler_with_memory", defaults.with_memory)),
        with_stack=bool(d.get("torch_profiler_with_stack", defaults.with_stack)),
        with_flops=bool(d.get("torch_profiler_with_flops", defaults.with_flops)),
        use_gzip=bool(d.get("torch_profiler_use_gzip", defaults.use_gzip)),
        capture_graphs=bool(d.get("capture_torch_profiler", defaults.capture_graphs)),
        wait_iterations=int(d.get("wait_iterations", defaults.wait_iterations)),
        warmup_iterations=int(d.get("warmup_iterations", defaults.warmup_iterations)),
        active_iterations=int(d.get("active_iterations", defaults.active_iterations)),
    )


def profiler_errors(settings: ProfilerSettings, device: DeviceKind) -> tuple[ConfigError, ...]:
    """What of the torch profiler's options this device cannot honour, each with its fix
    (the profiler kinds themselves are the support matrix's verdicts)."""
    if not settings.enabled:
        return ()
    if settings.profiler != "torch":
        return ()  # the support matrix refuses the other profiler kinds (check_support)
    where = _WHERE[device]
    errors = []
    known = PROFILER_ACTIVITIES[device]
    unknown = [a for a in (settings.activities or ()) if a not in known]
    if unknown:
        errors.append(
            ConfigError(
                f"{_ROOT}.torch_profiler_activities names {', '.join(unknown)}, which "
                f"{where} does not record (it records {', '.join(known)}"
                + (", PrivateUse1 being the NPU's kernels" if device is DeviceKind.NPU else "")
                + ").",
                f"keep torch_profiler_activities to {' and '.join(known)}, or leave it unset",
            )
        )
    if settings.capture_graphs:
        reason = (
            "the host captures no graphs"
            if device is DeviceKind.CPU
            else "vLLM's capture profiler asks torch for the CUDA activity, which an NPU "
            "does not have, so it would record no NPU kernel"
        )
        errors.append(
            ConfigError(
                f"{_ROOT}.capture_torch_profiler=true is not served on {where}: {reason}.",
                "drop capture_torch_profiler; profile the replayed graphs with "
                "/start_profile and /stop_profile",
            )
        )
    return tuple(errors)


def profiled_activities(
    settings: ProfilerSettings, device: DeviceKind
) -> frozenset[ProfiledActivity]:
    """What a session records on `device` (its default when the config names none)."""
    known = PROFILER_ACTIVITIES[device]
    names = settings.activities or _DEFAULT_ACTIVITIES[device]
    return frozenset(known[name] for name in names if name in known)


def profile_request(
    settings: ProfilerSettings, device: DeviceKind, worker_name: str
) -> ProfileRequest:
    """The session the device profiler runs for `settings` on `device`.

    Raises ConfigError (the first of profiler_errors) for what the device cannot honour.
    """
    errors = profiler_errors(settings, device)
    if errors:
        raise errors[0]
    if settings.profiler != "torch" or not settings.trace_dir:
        raise ConfigError(
            f"profiling on {_WHERE[device]} needs {_ROOT}.profiler=torch and a trace "
            f"directory (got profiler={settings.profiler!r}, "
            f"torch_profiler_dir={settings.trace_dir!r}).",
            f"start with {_ROOT}.profiler=torch {_ROOT}.torch_profiler_dir=DIR",
        )
    scheduled = settings.wait_iterations > 0 or settings.warmup_iterations > 0
    return ProfileRequest(
        trace_dir=settings.trace_dir,
        worker_name=worker_name,
        activities=profiled_activities(settings, device),
        record_shapes=settings.record_shapes,
        profile_memory=settings.with_memory,
        with_stack=settings.with_stack,
        with_flops=settings.with_flops,
        use_gzip=settings.use_gzip,
        schedule=ProfileSchedule(
            settings.wait_iterations, settings.warmup_iterations, settings.active_iterations
        )
        if scheduled
        else None,
    )
