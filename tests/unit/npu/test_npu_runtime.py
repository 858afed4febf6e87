"""NpuRuntime, the chip families, and the HCCL communicator (NpuRuntime's calls on the
emulated device: tests/integration/npu_ops/test_npu_runtime_on_device.py)."""

from __future__ import annotations

import pytest
import torch

from adapters.npu import HcclCommunicator, NpuRuntime
from ascend_core.chip import chip_family_from_soc
from ports.device import ChipFamily
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


def test_default_device_type_is_npu():
    assert NpuRuntime(make_torch_npu()).device_type == "npu"


class FakeDist:
    def __init__(self):
        self.calls = []

    def all_reduce(self, tensor, group=None):
        self.calls.append(group)
        tensor.mul_(2)  # as if two ranks held the same values


def test_hccl_communicator():
    dist = FakeDist()
    comm = HcclCommunicator(dist=dist, group="tp")
    t = torch.ones(3)
    assert comm.all_reduce(t) is t and t.eq(2).all() and dist.calls == ["tp"]
    assert comm.backend == "hccl"
    assert comm.visible_devices_variable() == "ASCEND_RT_VISIBLE_DEVICES"
