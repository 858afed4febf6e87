"""KV transfer between instances (P/D): the connector vLLM loads by name and the regions
it moves.

The plan says which of this plugin's modules vLLM's connector factory loads
(`ascend_core.deployment.PluginModule`); where each lives is said here, so the core names
no adapter module.
"""

from __future__ import annotations

from collections.abc import Mapping

from ascend_core.deployment import PluginModule

MODULE_PATHS: Mapping[PluginModule, str] = {
    PluginModule.MOONCAKE_V1: f"{__name__}.connector",
}


def module_path(value: str | PluginModule | None) -> str | None:
    """The kv_connector_module_path vLLM is given for a planned value."""
    return MODULE_PATHS[value] if isinstance(value, PluginModule) else value


def read_module_path(path: str | None) -> str | PluginModule | None:
    """A kv_connector_module_path as the core reads it: this plugin's own as PluginModule
    (what the plan set, seen again when a process plans the planned config)."""
    return next((m for m, p in MODULE_PATHS.items() if p == path), path or None)
