"""Chip family from the SoC name torch_npu reports (`torch_npu.npu.get_device_name`)."""

from __future__ import annotations

from ports.device import ChipFamily

# Prefixes as the SoC names appear in torch_npu 2.14.0's own sources: A2 spans
# Ascend910B1..Ascend910B4_1, A3 Ascend910_9362..Ascend910_9392; torch_npu treats
# Ascend910_95* and Ascend950* alike (its "arch35" check).
_PREFIXES: tuple[tuple[str, ChipFamily], ...] = (
    ("Ascend910B", ChipFamily.A2),
    ("Ascend910_93", ChipFamily.A3),
    ("Ascend910_95", ChipFamily.A5),
    ("Ascend950", ChipFamily.A5),
    ("Ascend310P", ChipFamily.P310),
)


def chip_family_from_soc(soc_name: str) -> ChipFamily | None:
    """The family of a SoC name, or None for a chip this plugin does not serve."""
    for prefix, family in _PREFIXES:
        if soc_name.startswith(prefix):
            return family
    return None
