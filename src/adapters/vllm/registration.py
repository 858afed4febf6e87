"""What `register_general` puts in place in every vLLM process; each step is re-entrant.

The entry point (adapters.vllm.plugin) asks the container for the serving device and
hands it here; nothing here imports the entry point back.
"""

from __future__ import annotations

import logging

from ports.device import ChipFamily, DeviceKind

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
        SPARSE_INDEXER_NAME,
        SPARSE_INDEXER_PATH,
        SPARSE_MLA_BACKEND_NAME,
        SPARSE_MLA_BACKEND_PATH,
    )

    for name, path in (
        (BACKEND_NAME, BACKEND_PATH),
        (MLA_BACKEND_NAME, MLA_BACKEND_PATH),
        (SPARSE_MLA_BACKEND_NAME, SPARSE_MLA_BACKEND_PATH),
        (SPARSE_INDEXER_NAME, SPARSE_INDEXER_PATH),
    ):
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


def apply_device_patches(kind: DeviceKind, family: ChipFamily) -> None:
    """The patches the serving device alone calls for; the deployment's come later."""
    from adapters.vllm.patches import apply_plan, device_patch_plan

    apply_plan(device_patch_plan(kind, family))


def register_all(kind: DeviceKind, family: ChipFamily) -> None:
    """Everything our platform needs in vLLM's registries, for the device that serves."""
    register_custom_ops()
    register_attention_backend()
    register_quantization()
    apply_device_patches(kind, family)
