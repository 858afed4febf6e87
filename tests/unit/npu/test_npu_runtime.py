"""NpuRuntime, the chip families, and the HCCL communicator (NpuRuntime's calls on the
emulated device: tests/integration/npu_ops/test_npu_runtime_on_device.py)."""

from __future__ import annotations

import pytest

from adapters.npu import HcclCommunicator
from ascend_core.chip import chip_family_from_soc
from ports.device import ChipFamily


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


def test_hccl_communicator_names_its_backend():
    assert HcclCommunicator().backend == "hccl"


def test_a_staged_collective_simply_runs_by_default() -> None:
    """HCCL takes device tensors, so nothing is staged on an NPU; a staged collective
    through the port's default runs once, as called (in a capture its host copy is then
    the device's to refuse)."""
    calls: list[int] = []
    assert HcclCommunicator().run_staged(lambda: calls.append(1) or "done") == "done"
    assert calls == [1]
