"""Loads the real torch_npu module, for the composition root on an NPU host only."""

from __future__ import annotations

import importlib
from types import ModuleType


def load_torch_npu() -> ModuleType:
    """Import torch_npu now; called only after the probe found it and CANN."""
    return importlib.import_module("torch_npu")
