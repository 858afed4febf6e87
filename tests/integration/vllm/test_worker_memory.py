"""The worker sizes the KV cache after vLLM's profiling pass: the peak is reset, a dummy
batch of max_num_batched_tokens runs, and only then is memory read through the port."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from engine_teardown import shut_down

from ascend_core.memory_budget import format_bytes
from ports.runtime import DeviceRuntime, MemoryInfo

EXPLICIT = 32 << 20
GIB = 1 << 30


class RecordingRuntime(DeviceRuntime):
    """The worker's real runtime, with every memory call written to a shared event list."""

    def __init__(self, inner: DeviceRuntime, events: list[str]) -> None:
        self.inner = inner
        self.events = events
        self.readings: list[MemoryInfo] = []

    @property
    def device_type(self) -> str:
        return self.inner.device_type

    def device(self, index: int) -> torch.device:
        return self.inner.device(index)

    def set_device(self, index: int) -> None:
        self.inner.set_device(index)

    def device_count(self) -> int:
        return self.inner.device_count()

    def device_name(self, index: int = 0) -> str:
        return self.inner.device_name(index)

    def memory_info(self) -> MemoryInfo:
        self.events.append("memory_info")
        info = self.inner.memory_info()
        self.readings.append(info)
        return info

    def allocated_bytes(self) -> int | None:
        self.events.append("allocated_bytes")
        return self.inner.allocated_bytes()

    def reset_peak_memory(self) -> None:
        self.events.append("reset_peak_memory")
        self.inner.reset_peak_memory()

    def synchronize(self) -> None:
        self.events.append("synchronize")
        self.inner.synchronize()

    def empty_cache(self) -> None:
        self.events.append("empty_cache")
        self.inner.empty_cache()

    def seed(self, seed: int) -> None:
        self.inner.seed(seed)

    def current_stream(self) -> Any:
        return self.inner.current_stream()

    def new_stream(self) -> Any:
        return self.inner.new_stream()

    def new_event(self, enable_timing: bool = False) -> Any:
        return self.inner.new_event(enable_timing)

    def runner_scope(self) -> Any:
        return self.inner.runner_scope()


@pytest.fixture(scope="module")
def llm(model_dirs: dict[str, str]):  # type: ignore[no-untyped-def]
    from vllm import LLM

    engine = LLM(
        model=model_dirs["llama"],
        dtype="float32",
        enforce_eager=True,
        max_model_len=512,
        max_num_batched_tokens=8192,
        kv_cache_memory_bytes=EXPLICIT,
        seed=0,
    )
    yield engine
    shut_down(engine)


@pytest.fixture
def recorded(llm, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The live worker with its runtime recorded and forward passes of the model logged."""
    worker = llm.llm_engine.model_executor.driver_worker.worker
    events: list[str] = []
    runtime = RecordingRuntime(worker.runtime, events)
    monkeypatch.setattr(worker, "runtime", runtime)

    def log_forward(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        events.append(f"forward({ids.shape[0] if ids is not None else '?'})")

    hook = worker.model_runner.model.register_forward_pre_hook(log_forward, with_kwargs=True)
    yield worker, runtime, events
    hook.remove()


def test_the_profiling_pass_runs_between_the_peak_reset_and_the_memory_reading(
    recorded,  # type: ignore[no-untyped-def]
) -> None:
    worker, _, events = recorded
    # --kv-cache-memory-bytes still profiles (as vLLM does), and wins.
    assert worker.determine_available_memory() == EXPLICIT
    tokens = worker.scheduler_config.max_num_batched_tokens
    assert events == [
        "empty_cache",
        "reset_peak_memory",
        f"forward({tokens})",
        "synchronize",
        "empty_cache",
        "memory_info",
    ]


def test_utilization_budget_is_positive_below_total_and_counts_the_activation_peak(
    recorded,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker, runtime, _ = recorded
    utilization = 0.3
    monkeypatch.setattr(worker.cache_config, "kv_cache_memory_bytes", None)
    monkeypatch.setattr(worker.cache_config, "gpu_memory_utilization", utilization)
    runtime.inner.reset_peak_memory()
    held_before = runtime.inner.memory_info().peak_allocated_bytes  # resident set now

    kv_bytes = worker.determine_available_memory()

    measured = runtime.readings[-1]
    assert 0 < kv_bytes < measured.total_bytes
    assert kv_bytes <= int(measured.total_bytes * utilization) - measured.peak_allocated_bytes
    # The resident peak covers at least the MLP's gate/up output of the dummy batch, which
    # only the profiling pass allocates (float32, max_num_batched_tokens rows).
    hf = worker.model_config.hf_config
    gate_up = worker.scheduler_config.max_num_batched_tokens * 2 * hf.intermediate_size * 4
    assert measured.peak_allocated_bytes - held_before >= gate_up


class FixedMemoryRuntime(RecordingRuntime):
    """The real runtime, with the memory numbers of another machine."""

    def __init__(self, inner: DeviceRuntime, memory: MemoryInfo) -> None:
        super().__init__(inner, [])
        self.memory = memory

    def memory_info(self) -> MemoryInfo:
        return self.memory


@pytest.mark.parametrize(
    ("free", "expected"),
    [(20 * GIB, 4 * GIB), (3 * GIB, 3 * GIB // 2)],  # the cap; half of what is available
)
def test_with_no_flag_the_host_default_comes_from_the_runtime_ports_numbers(
    llm,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
    free: int,
    expected: int,
) -> None:
    worker = llm.llm_engine.model_executor.driver_worker.worker
    memory = MemoryInfo(free_bytes=free, total_bytes=24 * GIB, peak_allocated_bytes=GIB)
    monkeypatch.setattr(worker, "runtime", FixedMemoryRuntime(worker.runtime, memory))
    monkeypatch.setattr(worker.cache_config, "kv_cache_memory_bytes", None)
    monkeypatch.setattr(worker.cache_config, "gpu_memory_utilization", 0.92)  # vLLM's default
    # So many sequences that they could fill any default: the memory share rules.
    monkeypatch.setattr(worker.scheduler_config, "max_num_seqs", 1 << 20)

    assert worker.determine_available_memory() == expected


def test_the_host_default_stops_at_what_max_num_seqs_sequences_can_fill(
    llm,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker = llm.llm_engine.model_executor.driver_worker.worker
    memory = MemoryInfo(free_bytes=20 * GIB, total_bytes=24 * GIB, peak_allocated_bytes=GIB)
    monkeypatch.setattr(worker, "runtime", FixedMemoryRuntime(worker.runtime, memory))
    monkeypatch.setattr(worker.cache_config, "kv_cache_memory_bytes", None)
    monkeypatch.setattr(worker.cache_config, "gpu_memory_utilization", 0.92)
    seqs = worker.scheduler_config.max_num_seqs
    one_sequence = worker._one_sequence_bytes()
    block = worker.cache_config.block_size
    per_token = one_sequence // (-(-512 // block) * block)

    with caplog.at_level("INFO", logger="vllm.plugins.ascend"):
        kv_bytes = worker.determine_available_memory()

    # The tiny model's sequences fill far less than the 4 GiB cap.
    assert kv_bytes == seqs * one_sequence + block * per_token < 4 * GIB
    said = f"({format_bytes(kv_bytes)}) that max_num_seqs={seqs} sequences of max_model_len=512"
    assert said in caplog.text
