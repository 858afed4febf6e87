"""What `register_general` puts in place in every vLLM process; each step is re-entrant."""

from __future__ import annotations

import logging

logger = logging.getLogger("vllm.plugins.ascend")


def register_custom_ops() -> None:
    from vllm.model_executor.custom_op import op_registry_oot

    from adapters.vllm.custom_ops import REPLACEMENTS

    for upstream, ours in REPLACEMENTS:
        if op_registry_oot.get(upstream.__name__) is not ours:
            upstream.register_oot(ours)


def register_attention_backend() -> None:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    from adapters.vllm.attention.names import (
        BACKEND_NAME,
        BACKEND_PATH,
        MLA_BACKEND_NAME,
        MLA_BACKEND_PATH,
    )

    for name, path in ((BACKEND_NAME, BACKEND_PATH), (MLA_BACKEND_NAME, MLA_BACKEND_PATH)):
        if name not in AttentionBackendEnum.__members__:
            AttentionBackendEnum.register(name, path)


def register_quantization() -> None:
    """`ascend` in vLLM's quantization registry (what `--quantization ascend` names)."""
    from vllm.model_executor.layers.quantization import (
        QUANTIZATION_METHODS,
        register_quantization_config,
    )

    from adapters.vllm.quantization.config import METHOD_NAME, AscendQuantConfig

    if METHOD_NAME not in QUANTIZATION_METHODS:
        register_quantization_config(METHOD_NAME)(AscendQuantConfig)


def apply_device_patches() -> None:
    """The patches the serving device alone calls for; the deployment's come later."""
    from adapters.vllm.patches import apply_plan, device_patch_plan
    from adapters.vllm.plugin import serving_device

    kind, family = serving_device()
    if kind is not None:
        apply_plan(device_patch_plan(kind, family))


def register_all() -> None:
    from adapters.vllm.plugin import decide_device

    if decide_device().kind is None:
        return  # another platform serves: leave vLLM's layers alone
    register_custom_ops()
    register_attention_backend()
    register_quantization()
    apply_device_patches()
