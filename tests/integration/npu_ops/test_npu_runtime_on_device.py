"""NpuRuntime on the emulated torch_npu.npu, whose calls run on the emulated `npu` device
(compiled C++: tests/support/emulated_npu_device)."""

from __future__ import annotations

import pytest

from adapters.npu import NpuRuntime
from ascend_core.errors import DeviceUnavailableError
from ports.device import ChipFamily, DeviceKind
from support.torch_npu_emulator import make_torch_npu


def test_runtime_calls_go_through_torch_npu_npu():
    # On the emulated device: emulated_device_checks.npu_runtime_runs_on_the_device.
    tnpu = make_torch_npu(soc_name="Ascend910_9391", device_count=2)
    rt = NpuRuntime(tnpu)
    assert rt.device_count() == 2 and rt.device_name() == "Ascend910_9391"
    assert rt.chip_family() is ChipFamily.A3
    assert {"device_count", "get_device_name"} <= set(tnpu.npu.calls)


def test_facts():
    facts = NpuRuntime(make_torch_npu(soc_name="Ascend910B2", device_count=8)).facts()
    assert (facts.kind, facts.chip_family, facts.device_count) == (DeviceKind.NPU, ChipFamily.A2, 8)
    assert facts.memory_bytes_per_device == 64 * 2**30 and facts.device_name == "Ascend910B2"


def test_facts_of_an_unserved_chip_name_it():
    with pytest.raises(DeviceUnavailableError, match="Ascend910A"):
        NpuRuntime(make_torch_npu(soc_name="Ascend910A")).facts()
