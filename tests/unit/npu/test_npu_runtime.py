"""NpuRuntime, the chip families, and the HCCL communicator (NpuRuntime's calls on the
emulated device: tests/integration/npu_ops/test_npu_runtime_on_device.py)."""

from __future__ import annotations

import pytest

from adapters.npu import HcclCommunicator, NpuRuntime
from ascend_core.chip import chip_family_from_soc
from ascend_core.errors import DeviceUnavailableError
from ports.device import ChipFamily, DeviceKind
from support.torch_npu_emulator import make_torch_npu


@pytest.mark.parametrize(
    ("soc", "family"),
    [
        ("Ascend910B1", ChipFamily.A2),
        ("Ascend910B4_1", ChipFamily.A2),
        ("Ascend910_9362", ChipFamily.A3),
        ("Ascend910_9392", ChipFamily.A3),
        ("Ascend310P3", ChipFamily.P310),
        ("Ascend950PR", ChipFamily.A5),
        ("Ascend910_9591", ChipFamily.A5),
        ("Ascend910A", None),
        ("Ascend310B1", None),
    ],
)
def test_chip_family_from_soc_name(soc, family):
    assert chip_family_from_soc(soc) is family


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


def test_hccl_communicator_names_its_backend():
    assert HcclCommunicator().backend == "hccl"
