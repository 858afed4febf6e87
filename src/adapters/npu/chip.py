"""Chip family from the SoC name torch_npu reports (`torch_npu.npu.get_device_name`).

The name -> family table is a pure decision and lives in the core (ascend_core.chip);
this module keeps the adapter's name for it.
"""

from __future__ import annotations

from ascend_core.chip import chip_family_from_soc, chip_family_from_soc_version

__all__ = ["chip_family_from_soc", "chip_family_from_soc_version"]
