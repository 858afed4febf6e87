"""`plan` with --kv-cache-memory-bytes: the flag is the KV budget, as in `vllm serve`, and
the doctor's verdict is the worker's message for the same numbers."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.doctor.plan_command import Target, plan_report
from adapters.doctor.report import Report
from adapters.doctor.serve_args import ServeArgs
from adapters.vllm.worker.kv_cache_bytes import kv_cache_budget
from ascend_core.memory_budget import KvCacheTooSmallError
from ascend_core.preflight import CheckItem, CheckStatus
from ports.device import ChipFamily, DeviceKind
from ports.runtime import MemoryInfo
from unit.doctor.large_models import LLAMA_70B_CONFIG, llama_70b_headers
from unit.fakes.environment import FakeEnvironment
from unit.fakes.model_files import FakeModelFiles
from unit.fakes.upstream import FakeUpstream

GIB = 1 << 30
A2 = Target(DeviceKind.NPU, ChipFamily.A2, 64 * GIB, None, "test: nominal A2")
# Llama-3-70B at tp=4: 2 x 80 layers x 2 KV heads x 128 x 2 B per token on a device.
KV_PER_TOKEN = 81_920
WEIGHTS_PER_DEVICE = 35_276_853_248
RESERVE = 2 * GIB + 8192 * 12 * 8192 * 2 // 4


def _plan(**parsed: Any) -> Report:
    """plan_report on a parse result as adapters.vllm.engine.doctor_args returns it."""
    args = ServeArgs.from_parsed(
        {"model": "/m/llama", "tensor_parallel_size": 4, "gpu_memory_utilization": 0.9} | parsed
    )
    files = FakeModelFiles({"config.json": LLAMA_70B_CONFIG}, llama_70b_headers(), "/m/llama")
    upstream = FakeUpstream({"vllm": "0.33.0", "torch": "2.13.0"})
    return plan_report(args, files, FakeEnvironment({}), upstream, A2)


def _item(report: Report, name: str) -> CheckItem:
    section = next(s for s in report.sections if s.title == "memory budget")
    return next(i for i in section.items if i.name == name)


def test_the_flag_is_the_whole_kv_budget_and_utilization_is_not_used() -> None:
    twenty_gib = 20 * GIB
    report = _plan(kv_cache_memory_bytes=twenty_gib, max_model_len=32768)
    memory = report.data["memory"]
    assert memory["budget_flag"] == "--kv-cache-memory-bytes"
    assert memory["kv_bytes_available"] == twenty_gib  # not 64 GiB x 0.9 - weights - reserve
    # 20 GiB / (128 tokens x 81,920 B = 10 MiB per block) = 2,048 blocks = 262,144 tokens.
    assert (memory["tokens"], memory["sequences"], memory["fits"]) == (262_144, 8, True)
    kv = _item(report, "KV cache")
    assert kv.status is CheckStatus.PASS
    assert f"--kv-cache-memory-bytes={twenty_gib} gives {twenty_gib} B" in kv.detail
    room = _item(report, "free memory")
    assert room.status is CheckStatus.PASS and "instead of --gpu-memory-utilization" in room.detail


def test_too_small_a_flag_fails_with_the_message_vllm_serve_raises() -> None:
    small = 1 * GIB
    report = _plan(kv_cache_memory_bytes=small)  # max_model_len 131,072 from config.json
    kv = _item(report, "KV cache")
    # What the worker raises for the same flag, per-token size and length: the serving
    # path's own function (adapters.vllm.worker.kv_cache_bytes), fed the device's numbers.
    with pytest.raises(KvCacheTooSmallError) as served:
        kv_cache_budget(
            MemoryInfo(free_bytes=64 * GIB, total_bytes=64 * GIB, peak_allocated_bytes=0),
            utilization=0.9,
            explicit_bytes=small,
            one_sequence_bytes=KV_PER_TOKEN * 131_072,
            max_model_len=131_072,
            block_size=128,
        )
    assert kv.status is CheckStatus.FAIL
    assert (kv.detail, kv.fix) == (served.value.what, served.value.hint)
    # One sequence: 1,024 blocks x 10 MiB = 10 GiB; 1 GiB holds 102 blocks = 13,056 tokens.
    assert kv.fix.startswith(f"--kv-cache-memory-bytes {10 * GIB} ")
    assert "--max-model-len 13056 " in kv.fix
    assert [f["kind"] for f in report.data["memory"]["fixes"]] == [
        "kv_cache_memory_bytes",
        "max_model_len",
    ]


def test_a_flag_beyond_what_weights_and_reserve_leave_free_is_warned() -> None:
    room = 64 * GIB - WEIGHTS_PER_DEVICE - RESERVE
    report = _plan(kv_cache_memory_bytes=room + 1, max_model_len=8192)
    item = _item(report, "free memory")
    assert item.status is CheckStatus.WARN
    assert f"--kv-cache-memory-bytes={room + 1} " in item.detail
    assert f"{room} B" in item.detail
    assert item.fix.startswith(f"lower --kv-cache-memory-bytes to at most {room}")
    assert _item(report, "KV cache").status is CheckStatus.PASS


def test_without_the_flag_the_utilization_budget_is_unchanged() -> None:
    memory = _plan().data["memory"]
    assert memory["budget_flag"] == "--gpu-memory-utilization"
    assert memory["kv_bytes_available"] == int(64 * GIB * 0.9) - WEIGHTS_PER_DEVICE - RESERVE
