"""Chip family from the SoC name torch_npu reports, or from its numeric SoC version.

Names follow vllm_ascend/device/hardware.py (_SOC_VERSION_TO_DEVICE_TYPE,
device_type_from_soc_version: case-insensitive, any name containing "ascend950" is A5) and
torch_npu 2.14.0's own sources (Ascend910B1..Ascend910B4_1, Ascend910_9362..Ascend910_9392,
Ascend910_95* treated as Ascend950, the "arch35" check). Numbers follow
device_type_from_runtime_soc.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ascend_core.errors import DeviceUnavailableError
from ports.device import ChipFamily

# Whole names the reference lists that no family prefix below covers (short build names).
_EXACT: Mapping[str, ChipFamily] = MappingProxyType(
    {"910b": ChipFamily.A2, "910c": ChipFamily.A3, "310p": ChipFamily.P310}
)

# (lower-case prefix, family): every name the reference and torch_npu list begins with one.
_PREFIXES: tuple[tuple[str, ChipFamily], ...] = (
    ("ascend910b", ChipFamily.A2),  # ascend910b1..b4, b2c, b4-1 / B4_1
    ("ascend910_93", ChipFamily.A3),  # ascend910_9362..9392
    ("ascend910_95", ChipFamily.A5),  # torch_npu's arch35 alias of Ascend950
    ("ascend310p", ChipFamily.P310),  # ascend310p1/3/5/7 and the p3vir0x virtual slices
)

# Any name containing this is A5 (Ascend950PR, Ascend950DT, ...).
_A5_MARK = "ascend950"

# Inclusive ranges of torch_npu's numeric SoC version (torch_npu.npu._C._npu_get_soc_version).
_VERSION_RANGES: tuple[tuple[int, int, ChipFamily], ...] = (
    (200, 205, ChipFamily.P310),
    (220, 225, ChipFamily.A2),
    (250, 256, ChipFamily.A3),
    (260, 260, ChipFamily.A5),
)


def chip_family_from_soc(soc_name: str) -> ChipFamily | None:
    """The family of a SoC name in any case, or None for a chip this plugin does not serve."""
    name = soc_name.strip().lower()
    if _A5_MARK in name:
        return ChipFamily.A5
    if name in _EXACT:
        return _EXACT[name]
    for prefix, family in _PREFIXES:
        if name.startswith(prefix):
            return family
    return None


def served_chip_family(soc_name: str) -> ChipFamily:
    """The family of the NPU that serves, or DeviceUnavailableError naming the chip."""
    family = chip_family_from_soc(soc_name)
    if family is None:
        raise DeviceUnavailableError(
            f"NPU {soc_name!r} is not of a chip family this plugin serves (A2, A3, A5, 310P).",
            "serve on an Atlas A2/A3/A5 or 300I (310P) device, or set VLLM_ASCEND_DEVICE=cpu",
        )
    return family


def chip_family_from_soc_version(version: int) -> ChipFamily | None:
    """The family of torch_npu's numeric SoC version, or None for an unknown number."""
    for low, high, family in _VERSION_RANGES:
        if low <= version <= high:
            return family
    return None
