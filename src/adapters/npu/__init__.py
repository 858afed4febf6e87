"""The NPU adapter: ops, runtime, HCCL and probe on torch_npu (injected, never imported here).

Public: NpuOps, NpuRuntime, HcclCommunicator, NpuProbe, chip_family_from_soc.
"""

from adapters.npu.chip import chip_family_from_soc
from adapters.npu.collective import HcclCommunicator
from adapters.npu.ops import NpuOps
from adapters.npu.probe import NpuProbe
from adapters.npu.runtime import NpuRuntime

__all__ = ["HcclCommunicator", "NpuOps", "NpuProbe", "NpuRuntime", "chip_family_from_soc"]
