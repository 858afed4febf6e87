"""The core's attention-backend decision mapped to a class path vLLM can import."""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.vllm.attention.backend import BACKEND_PATH
from ascend_core.errors import BackendSelectionError
from ports.device import DeviceKind

if TYPE_CHECKING:
    from vllm.v1.attention.selector import AttentionSelectorConfig


def backend_path(config: AttentionSelectorConfig, kind: DeviceKind) -> str:
    unsupported = [
        name
        for name, present in (
            ("MLA", config.use_mla),
            ("sparse attention", config.use_sparse),
            ("attention sinks", config.has_sink),
            ("sliding window", getattr(config, "has_sliding_window", False)),
        )
        if present
    ]
    if unsupported:
        raise BackendSelectionError(
            f"No Ascend attention backend for {', '.join(unsupported)} on {kind.value}.",
            "serve a standard decoder (MHA/GQA) model",
        )
    return BACKEND_PATH
