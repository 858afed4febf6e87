"""The core's attention-backend decision mapped to a class path vLLM can import."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from adapters.vllm.attention.names import BACKEND_PATH, MLA_BACKEND_PATH
from ascend_core.attention import AttentionBackendKind, AttentionRequest, select_attention_backend
from ascend_core.deployment import ModelFacts
from ascend_core.errors import BackendSelectionError
from ports.device import ChipFamily, DeviceKind

if TYPE_CHECKING:
    from vllm.v1.attention.selector import AttentionSelectorConfig

logger = logging.getLogger("vllm.plugins.ascend")

# Backend kinds that have a vLLM backend class in this build. MHA/GQA on the host and on
# an NPU are one backend, MLA another: the device's ops ports do the math.
BACKEND_PATHS: dict[AttentionBackendKind, str] = {
    AttentionBackendKind.HOST: BACKEND_PATH,
    AttentionBackendKind.STANDARD: BACKEND_PATH,
    AttentionBackendKind.MLA: MLA_BACKEND_PATH,
}


def backend_path(
    config: AttentionSelectorConfig,
    kind: DeviceKind,
    family: ChipFamily,
    training_consistency: bool = False,
    model: ModelFacts | None = None,
) -> str:
    """Ask the core which backend kind serves, then refuse what our paged backend cannot do.

    training_consistency: VLLM_ASCEND_TRAINING_CONSISTENCY (or vLLM's own batch-invariant
    switch in `config`); model: the core's facts of the model being served, when known.
    """
    choice = select_attention_backend(
        AttentionRequest(
            use_mla=bool(config.use_mla),
            use_sparse=bool(config.use_sparse),
            chip_family=family,
            device_kind=kind,
            use_compressed=bool(model is not None and model.compressed_attention),
            training_consistency=training_consistency
            or bool(getattr(config, "use_batch_invariant", False)),
            model=model.architecture if model is not None else "",
        )
    )
    path = BACKEND_PATHS.get(choice.kind)
    if path is None:
        raise BackendSelectionError(
            f"The core chose the {choice.kind.value} attention backend ({choice.reason}), "
            "which this build does not have yet.",
            "serve a standard MHA/GQA model",
        )
    extras = [
        name
        for name, present in (
            ("attention sinks", config.has_sink),
            ("sliding window", getattr(config, "has_sliding_window", False)),
        )
        if present
    ]
    if extras:
        raise BackendSelectionError(
            f"The {choice.kind.value} attention backend does not support {', '.join(extras)}.",
            "serve a model with full causal attention",
        )
    logger.debug("Attention backend %s: %s", choice.kind.value, choice.reason)
    return path
