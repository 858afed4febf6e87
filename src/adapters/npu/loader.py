"""The one place torch_npu is imported: on an NPU host, when a worker first needs it."""

from __future__ import annotations

import importlib
from types import ModuleType

from adapters.npu.probe import SET_ENV_HINT, TORCH_NPU_REQUIREMENT
from ascend_core.errors import DeviceUnavailableError


def load_torch_npu() -> ModuleType:
    """Import torch_npu (which registers the "npu" device and the "hccl" backend with torch).

    Called lazily by the composition root, never at import time: without CANN,
    importing torch_npu fails, and the probe has already said why.
    """
    try:
        return importlib.import_module("torch_npu")
    except ImportError as exc:
        raise DeviceUnavailableError(
            f"torch_npu could not be imported: {exc}",
            f"pip install {TORCH_NPU_REQUIREMENT}, and {SET_ENV_HINT}",
        ) from exc
