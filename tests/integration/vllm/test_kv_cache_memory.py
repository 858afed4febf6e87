"""KV-cache sizing on the host: the flags are honoured, and a cache too small for one
sequence of max_model_len fails with the numbers and the flag to change."""

from __future__ import annotations

import pytest

from adapters.vllm.memory import kv_cache_budget
from ascend_core.errors import ConfigError
from ports.runtime import MemoryInfo

GIB = 1 << 30
HOST = MemoryInfo(free_bytes=20 * GIB, total_bytes=24 * GIB, peak_allocated_bytes=2 * GIB)


def test_explicit_bytes_win() -> None:
    budget = kv_cache_budget(HOST, 0.9, 3 * GIB, one_sequence_bytes=1 << 20, max_model_len=512)
    assert budget.kv_cache_bytes == 3 * GIB
    assert "--kv-cache-memory-bytes" in budget.reason


def test_utilization_is_a_fraction_of_host_memory_minus_what_the_process_holds() -> None:
    budget = kv_cache_budget(HOST, 0.5, None, one_sequence_bytes=1 << 20, max_model_len=512)
    assert budget.kv_cache_bytes == 12 * GIB - 2 * GIB


def test_too_small_for_one_sequence_names_numbers_and_flag() -> None:
    with pytest.raises(ConfigError) as err:
        kv_cache_budget(HOST, 0.9, 4096, one_sequence_bytes=65536, max_model_len=512)
    message = str(err.value)
    assert "4096" in message and "65536" in message and "max_model_len=512" in message
    assert "--kv-cache-memory-bytes" in message and "--max-model-len" in message


def test_utilization_too_low_names_that_flag() -> None:
    with pytest.raises(ConfigError, match="--gpu-memory-utilization"):
        kv_cache_budget(HOST, 0.05, None, one_sequence_bytes=GIB, max_model_len=512)


def test_explicit_bytes_above_free_memory_are_refused() -> None:
    with pytest.raises(ConfigError, match="exceeds"):
        kv_cache_budget(HOST, 0.9, 30 * GIB, one_sequence_bytes=1, max_model_len=512)


@pytest.mark.vllm
def test_engine_start_fails_with_the_budget_error(model_dirs: dict[str, str]) -> None:
    from vllm import LLM

    with pytest.raises(Exception) as err:
        LLM(model=model_dirs["llama"], dtype="float32", enforce_eager=True, max_model_len=512,
            kv_cache_memory_bytes=8192)
    text = f"{err.value!r} {err.value.__cause__!r}"
    assert "max_model_len=512" in text and "--kv-cache-memory-bytes" in text
