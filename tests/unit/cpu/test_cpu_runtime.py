"""CpuRuntime and GlooCommunicator: the host as a device."""

from __future__ import annotations

import psutil
import torch

from adapters.cpu.communicator import GlooCommunicator
from adapters.cpu.runtime import CpuRuntime
from ports.runtime import DeviceRuntime


def test_runtime_is_the_host_device() -> None:
    rt = CpuRuntime()
    assert isinstance(rt, DeviceRuntime)
    assert rt.device(0) == torch.device("cpu") == rt.device(3)
    assert rt.device_name()
    rt.set_device(0)
    rt.synchronize()
    rt.empty_cache()
    stream = rt.current_stream()
    stream.synchronize()
    stream.wait_stream(stream)
    assert stream.query() and rt.current_stream() is stream


def test_allocated_bytes_count_a_host_tensor_while_it_lives() -> None:
    """glibc's heap in use: a 64 MiB tensor raises it by its bytes (plus malloc's header
    and torch's alignment) and freeing it takes them back; the resident set could not
    tell (freed pages may stay resident)."""
    rt = CpuRuntime()
    before = rt.allocated_bytes()
    assert before is not None and before > 0
    size = 64 << 20
    held = torch.ones(size, dtype=torch.int8)
    during = rt.allocated_bytes()
    assert during is not None and size <= during - before <= size + (256 << 10)
    del held
    after = rt.allocated_bytes()
    assert after is not None and abs(after - before) <= 256 << 10


def test_memory_info_is_host_memory() -> None:
    info = CpuRuntime().memory_info()
    assert info.total_bytes == psutil.virtual_memory().total
    assert 0 < info.free_bytes <= info.total_bytes
    assert info.peak_allocated_bytes >= psutil.Process().memory_info().rss // 2


def test_peak_memory_grows_with_allocation_and_resets() -> None:
    rt = CpuRuntime()
    rt.reset_peak_memory()
    before = rt.memory_info().peak_allocated_bytes
    big = torch.ones(64 * 1024 * 1024 // 4)  # 64 MiB, touched
    assert rt.memory_info().peak_allocated_bytes >= before + 48 * 1024 * 1024
    del big
    rt.reset_peak_memory()
    assert rt.memory_info().peak_allocated_bytes < before + 48 * 1024 * 1024


def test_seed_makes_torch_random_repeatable() -> None:
    rt = CpuRuntime()
    rt.seed(7)
    a = torch.randn(4)
    rt.seed(7)
    assert torch.equal(a, torch.randn(4))


def test_communicator_names_gloo() -> None:
    assert GlooCommunicator().backend == "gloo"
