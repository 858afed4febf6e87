"""The NPU adapter: ops, runtime, HCCL and probe on torch_npu (injected, never imported here).

Public: NpuOps, NpuRuntime, HcclCommunicator, NpuProbe. Each is
imported on first use: ops and runtime import torch, which fails where torch_npu is
installed without CANN, exactly the host `adapters.npu.probe` must explain.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adapters.npu.collective import HcclCommunicator
    from adapters.npu.ops import NpuOps
    from adapters.npu.probe import NpuProbe
    from adapters.npu.runtime import NpuRuntime

_HOMES = {
    "HcclCommunicator": "adapters.npu.collective",
    "NpuOps": "adapters.npu.ops",
    "NpuProbe": "adapters.npu.probe",
    "NpuRuntime": "adapters.npu.runtime",
}
__all__ = ["HcclCommunicator", "NpuOps", "NpuProbe", "NpuRuntime"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'adapters.npu' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
