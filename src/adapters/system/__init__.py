"""Host-side adapters of the driven ports: environment, installed packages, model files.

The names below are imported from their modules on first use (PEP 562): the container
imports this package in every vLLM process for the environment alone, and the model
files and upstream adapters (attrs classes, importlib.metadata) serve later, if at all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adapters.system.environment import OsEnvironment
    from adapters.system.model_files import LocalModelFiles, ModelFilesError
    from adapters.system.upstream import MetadataUpstream

_MODULES = {
    "LocalModelFiles": "adapters.system.model_files",
    "MetadataUpstream": "adapters.system.upstream",
    "ModelFilesError": "adapters.system.model_files",
    "OsEnvironment": "adapters.system.environment",
}

__all__ = ["LocalModelFiles", "MetadataUpstream", "ModelFilesError", "OsEnvironment"]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
