"""Files `additional_config` names, and whether they exist, asked through the LocalFiles port.

The adapter calls `probe_referenced_files` and puts the answer in Deployment.readable_files;
the plan then refuses a missing file (vllm_ascend/ascend_config.py: EplbConfig checks
expert_map_path with os.path.exists and os.access(R_OK)).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ports.local_files import LocalFiles

# Dotted paths (under additional_config) whose value is a file that must exist.
FILE_KEYS: tuple[str, ...] = ("eplb_config.expert_map_path",)


def referenced_files(raw: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The file paths `raw` (vLLM's additional_config) names under FILE_KEYS, as given."""
    found = []
    for dotted in FILE_KEYS:
        value: Any = raw or {}
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if isinstance(value, str) and value.strip():
            found.append(value)
    return tuple(found)


def probe_referenced_files(raw: Mapping[str, Any] | None, files: LocalFiles) -> dict[str, bool]:
    """Each file `raw` names -> whether `files` finds it readable."""
    return {path: files.is_readable_file(path) for path in referenced_files(raw)}
