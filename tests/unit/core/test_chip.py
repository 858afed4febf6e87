"""SoC name (or numeric SoC version) -> chip family, as the reference plugin maps them."""

from __future__ import annotations

import pytest

from ascend_core.chip import chip_family_from_soc, chip_family_from_soc_version
from ports.device import ChipFamily

A2, A3, A5, P310 = ChipFamily.A2, ChipFamily.A3, ChipFamily.A5, ChipFamily.P310

# Every name of vllm_ascend/device/hardware.py _SOC_VERSION_TO_DEVICE_TYPE, as it lists them.
REFERENCE_NAMES = {
    "910b": A2,
    "910c": A3,
    "310p": P310,
    "ascend910b1": A2,
    "ascend910b2": A2,
    "ascend910b2c": A2,
    "ascend910b3": A2,
    "ascend910b4": A2,
    "ascend910b4-1": A2,
    "ascend910_9391": A3,
    "ascend910_9381": A3,
    "ascend910_9372": A3,
    "ascend910_9392": A3,
    "ascend910_9382": A3,
    "ascend910_9362": A3,
    "ascend910_9363": A3,
    "ascend310p1": P310,
    "ascend310p3": P310,
    "ascend310p5": P310,
    "ascend310p7": P310,
    "ascend310p3vir01": P310,
    "ascend310p3vir02": P310,
    "ascend310p3vir04": P310,
    "ascend310p3vir08": P310,
}


@pytest.mark.parametrize(("name", "family"), sorted(REFERENCE_NAMES.items()))
def test_every_name_the_reference_maps(name, family):
    """vllm_ascend/device/hardware.py device_type_from_soc_version: the table, in any case."""
    assert chip_family_from_soc(name) is family
    assert chip_family_from_soc(name.upper()) is family
    assert chip_family_from_soc(f" {name.capitalize()} ") is family


@pytest.mark.parametrize("name", ["Ascend950PR", "ascend950dt", "ASCEND950", "Ascend910_9591"])
def test_a5_names(name):
    """device_type_from_soc_version: any name containing "ascend950" is A5; torch_npu treats
    Ascend910_95* as the same generation (its arch35 check)."""
    assert chip_family_from_soc(name) is A5


@pytest.mark.parametrize("name", ["Ascend910A", "Ascend910ProB", "Ascend310B1", "", "gpu"])
def test_chips_the_plugin_does_not_serve(name):
    assert chip_family_from_soc(name) is None


@pytest.mark.parametrize(
    ("version", "family"),
    [(200, P310), (205, P310), (220, A2), (225, A2), (250, A3), (256, A3), (260, A5)],
)
def test_numeric_soc_versions(version, family):
    """vllm_ascend/device/hardware.py device_type_from_runtime_soc: its ranges."""
    assert chip_family_from_soc_version(version) is family


@pytest.mark.parametrize("version", [0, 199, 206, 219, 226, 249, 257, 259, 261])
def test_numbers_outside_the_ranges(version):
    assert chip_family_from_soc_version(version) is None


def test_a_chip_of_no_served_family_is_refused_by_name():
    from ascend_core.chip import served_chip_family
    from ascend_core.errors import DeviceUnavailableError

    assert served_chip_family("ascend910_9391") is A3
    with pytest.raises(DeviceUnavailableError, match="'Ascend610' is not of a chip family"):
        served_chip_family("Ascend610")
