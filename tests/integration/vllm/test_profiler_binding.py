"""vLLM's worker profiler lifecycle (start/stop, delay and max iterations, the schedule's
warmup, step annotations, /start_profile's profiler_kwargs) on the DeviceProfiler port
(a fake here): adapters.vllm.worker.profiling.PortProfiler."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from vllm.config import ProfilerConfig

from adapters.vllm.worker.profiling import (
    PortProfiler,
    vllm_profiler_check_skipped,
    worker_profiler,
)
from ports.device import DeviceKind
from ports.profiler import ProfiledActivity
from unit.fakes.profiler import FakeProfiler


def _config(**fields: Any) -> Any:
    """What the binding reads of a VllmConfig (building one needs a platform)."""
    return SimpleNamespace(
        profiler_config=ProfilerConfig(
            profiler="torch", torch_profiler_dir="/traces", ignore_frontend=True, **fields
        )
    )


def _bound(**fields: Any) -> tuple[PortProfiler, FakeProfiler]:
    device = FakeProfiler()
    profiler = worker_profiler(_config(**fields), DeviceKind.NPU, device)
    assert profiler is not None
    return profiler, device


def _steps(profiler: PortProfiler, n: int) -> None:
    for i in range(n):
        profiler.step()
        with profiler.annotate_context_manager(f"step{i}"):
            pass


def test_off_means_no_profiler() -> None:
    off = SimpleNamespace(profiler_config=ProfilerConfig())
    assert worker_profiler(off, DeviceKind.CPU, FakeProfiler()) is None  # type: ignore[arg-type]


def test_start_and_stop_reach_the_device_with_vllms_trace_name() -> None:
    profiler, device = _bound()
    profiler.set_output_name("gen_dp0_pp0_tp0_dcp0_ep0_rank0")
    profiler.start()
    _steps(profiler, 2)
    profiler.stop()
    assert device.names() == ["start", "annotate", "annotate", "stop"]
    request = device.calls[0][1]
    assert request.worker_name == "gen_dp0_pp0_tp0_dcp0_ep0_rank0"  # type: ignore[attr-defined]
    assert request.activities == {ProfiledActivity.HOST, ProfiledActivity.DEVICE}  # type: ignore[attr-defined]
    assert profiler.last_trace == "/traces/gen_dp0_pp0_tp0_dcp0_ep0_rank0.trace"


def test_delay_and_max_iterations_start_and_stop_the_device() -> None:
    profiler, device = _bound(delay_iterations=2, max_iterations=1)
    profiler.start()
    assert device.names() == []
    # Step 1 waits; step 2 starts and is recorded (annotated); step 3 is past the one
    # allowed: stopped before it runs; step 4 finds the session over.
    _steps(profiler, 4)
    assert device.names() == ["start", "annotate", "stop"]


def test_a_schedules_warmup_steps_do_not_count_toward_max_iterations() -> None:
    profiler, device = _bound(wait_iterations=1, warmup_iterations=1, max_iterations=2)
    profiler.start()
    _steps(profiler, 3)
    assert device.names().count("step") == 3 and "stop" not in device.names()
    _steps(profiler, 1)
    assert device.names()[-1] == "stop"


def test_host_ops_off_means_no_annotations() -> None:
    profiler, device = _bound(torch_profiler_activities=["PrivateUse1"])
    profiler.start()
    _steps(profiler, 1)
    assert device.names() == ["start"]


def test_start_profile_kwargs_change_one_session_and_unknown_ones_are_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    profiler, device = _bound()
    profiler.set_profiler_kwargs({"record_shapes": True, "acc_events": True})
    profiler.start()
    profiler.stop()
    profiler.set_profiler_kwargs(None)
    profiler.start()
    profiler.stop()
    first, second = (c[1] for c in device.calls if c[0] == "start")
    assert (first.record_shapes, second.record_shapes) == (True, False)  # type: ignore[attr-defined]
    assert "acc_events" in caplog.text and "ignored" in caplog.text


def test_vllms_own_device_type_check_is_skipped_only_around_the_worker_init() -> None:
    config = _config()
    asked = config.profiler_config
    with vllm_profiler_check_skipped(config):
        assert config.profiler_config.profiler is None
    assert config.profiler_config is asked
