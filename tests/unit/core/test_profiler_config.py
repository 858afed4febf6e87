"""vLLM's profiler config against each device: what a session records, and what the plan
refuses (the profiler kinds by the support matrix, the options by the profiler step)."""

from __future__ import annotations

import pytest

from ascend_core.errors import ConfigError, UnsupportedFeatureError
from ascend_core.plan import plan_config
from ascend_core.profiling import ProfilerSettings, profile_request, profiler_errors
from ports.device import DeviceKind
from ports.profiler import ProfiledActivity, ProfileSchedule
from unit.core.plan_fixtures import host, npu

HOST, DEVICE = ProfiledActivity.HOST, ProfiledActivity.DEVICE
TORCH = ProfilerSettings(profiler="torch", trace_dir="/traces")


def test_the_host_records_its_cpu_activity_by_default() -> None:
    request = profile_request(TORCH, DeviceKind.CPU, "rank0")
    assert request.activities == {HOST}
    assert (request.trace_dir, request.worker_name) == ("/traces", "rank0")


def test_an_npu_records_host_ops_and_npu_kernels_by_default() -> None:
    assert profile_request(TORCH, DeviceKind.NPU, "rank0").activities == {HOST, DEVICE}


def test_privateuse1_alone_records_only_the_npu_kernels() -> None:
    settings = ProfilerSettings(profiler="torch", trace_dir="/t", activities=("PrivateUse1",))
    assert profile_request(settings, DeviceKind.NPU, "w").activities == {DEVICE}


def test_the_options_reach_the_request() -> None:
    settings = ProfilerSettings(
        profiler="torch", trace_dir="/t", record_shapes=True, with_memory=True,
        with_stack=False, with_flops=True, use_gzip=False,
        wait_iterations=1, warmup_iterations=2, active_iterations=3,
    )  # fmt: skip
    request = profile_request(settings, DeviceKind.CPU, "w")
    assert (request.record_shapes, request.profile_memory, request.with_stack) == (
        True, True, False,
    )  # fmt: skip
    assert (request.with_flops, request.use_gzip) == (True, False)
    assert request.schedule == ProfileSchedule(wait=1, warmup=2, active=3)


def test_without_wait_or_warmup_every_step_is_recorded() -> None:
    assert profile_request(TORCH, DeviceKind.CPU, "w").schedule is None


@pytest.mark.parametrize(
    ("device", "activity"),
    [(DeviceKind.NPU, "CUDA"), (DeviceKind.NPU, "XPU"), (DeviceKind.CPU, "PrivateUse1")],
)
def test_an_activity_the_device_does_not_record_is_refused(
    device: DeviceKind, activity: str
) -> None:
    settings = ProfilerSettings(profiler="torch", trace_dir="/t", activities=("CPU", activity))
    (error,) = profiler_errors(settings, device)
    assert activity in error.what and "torch_profiler_activities" in error.hint
    with pytest.raises(ConfigError, match=activity):
        profile_request(settings, device, "w")


@pytest.mark.parametrize("device", [DeviceKind.CPU, DeviceKind.NPU])
def test_the_graph_capture_profiler_is_refused_with_its_reason(device: DeviceKind) -> None:
    settings = ProfilerSettings(profiler="torch", trace_dir="/t", capture_graphs=True)
    (error,) = profiler_errors(settings, device)
    assert "capture_torch_profiler" in error.what
    reason = "captures no graphs" if device is DeviceKind.CPU else "CUDA activity"
    assert reason in error.what


def test_off_is_no_request() -> None:
    assert profiler_errors(ProfilerSettings(), DeviceKind.NPU) == ()
    with pytest.raises(ConfigError, match="profiler=torch"):
        profile_request(ProfilerSettings(), DeviceKind.NPU, "w")


@pytest.mark.parametrize("place", [host, npu])
def test_the_plan_serves_the_torch_profiler_and_says_what_it_records(place) -> None:  # type: ignore[no-untyped-def]
    plan = plan_config(place(profiler=TORCH))
    assert plan.errors == ()
    (note,) = [w for w in plan.warnings if w.startswith("Profiling")]
    assert "/traces" in note
    assert ("NPU's kernels" in note) is (place is npu)


@pytest.mark.parametrize("kind", ["cuda", "proton"])
@pytest.mark.parametrize("place", [host, npu])
def test_the_plan_refuses_the_cuda_and_proton_profilers(place, kind: str) -> None:  # type: ignore[no-untyped-def]
    (error,) = plan_config(place(profiler=ProfilerSettings(profiler=kind))).errors
    assert isinstance(error, UnsupportedFeatureError)
    assert error.feature == f"PROFILER_{kind.upper()}"
    assert "profiler=torch" in error.hint


def test_the_plan_refuses_an_option_the_npu_cannot_honour() -> None:
    settings = ProfilerSettings(profiler="torch", trace_dir="/t", activities=("CUDA",))
    (error,) = plan_config(npu(profiler=settings)).errors
    assert "CUDA" in error.what


def test_the_references_old_timing_variable_points_to_the_profiler() -> None:
    from ascend_core.env_registry import unknown_variables
    from unit.fakes.environment import FakeEnvironment

    (found,) = unknown_variables(FakeEnvironment({"VLLM_ASCEND_MODEL_EXECUTE_TIME_OBSERVE": "1"}))
    assert "was removed" in found.what and "--profiler-config" in found.what
