"""The worker sizes the KV cache after vLLM's profiling pass: the peak is reset, a dummy
batch of max_num_batched_tokens runs, and only then is memory read through the port."""

from __future__ import annotations

from typing import Any

import pytest
from engine_teardown import shut_down

from ascend_core.memory_budget import format_bytes
from ports.runtime import MemoryInfo
from unit.fakes.recording_runtime import FixedMemoryRuntime, RecordingRuntime

EXPLICIT = 32 << 20
GIB = 1 << 30


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
