"""The core's attention-backend decision mapped to a class path vLLM can import."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from adapters.vllm.attention.names import BACKEND_PATH, MLA_BACKEND_PATH, SPARSE_MLA_BACKEND_PATH
from ascend_core.attention import (
    AttentionBackendKind,
    LayerAttention,
    attention_request,
    serving_backend,
)
from ascend_core.deployment import ModelFacts
from ports.device import ChipFamily, DeviceKind

if TYPE_CHECKING:
    from vllm.v1.attention.selector import AttentionSelectorConfig

logger = logging.getLogger("vllm.plugins.ascend")

# A class for each of the core's BUILT_BACKENDS (a test keeps the two equal).
BACKEND_PATHS: dict[AttentionBackendKind, str] = {
    AttentionBackendKind.HOST: BACKEND_PATH,
    AttentionBackendKind.STANDARD: BACKEND_PATH,
    AttentionBackendKind.MLA: MLA_BACKEND_PATH,
    AttentionBackendKind.SPARSE_MLA: SPARSE_MLA_BACKEND_PATH,
}


def backend_path(
    config: AttentionSelectorConfig,
    kind: DeviceKind,
    family: ChipFamily,
    batch_invariant: bool = False,
    model: ModelFacts | None = None,
) -> str:
    """The class of the backend the core chooses for this layer (the doctor asks the same).

    batch_invariant: VLLM_ASCEND_TRAINING_CONSISTENCY or VLLM_BATCH_INVARIANT (vLLM also
    passes its own switch in `config`); model: the core's facts of the model, when known.
    """
    layer = LayerAttention(
        use_mla=bool(config.use_mla),
        use_sparse=bool(config.use_sparse),
        sliding_window=bool(getattr(config, "has_sliding_window", False)),
        attention_sinks=bool(config.has_sink),
    )
    invariant = batch_invariant or bool(getattr(config, "use_batch_invariant", False))
    request = attention_request(model, kind, family, batch_invariant=invariant, layer=layer)
    choice = serving_backend(request)
    logger.debug("Attention backend %s: %s", choice.kind.value, choice.reason)
    return BACKEND_PATHS[choice.kind]
