"""What `register_general` puts in place in every vLLM process; each step is re-entrant.

The entry point (adapters.vllm.engine.plugin) asks the container for the serving device and
hands it here; nothing here imports the entry point back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from adapters.vllm.models import MODEL_CLASSES
from ascend_core.errors import ConfigError
from ascend_core.model_registry import REGISTRATIONS, Registration, ours_only
from ports.device import ChipFamily, DeviceKind

logger = logging.getLogger("vllm.plugins.ascend")


def register_custom_ops() -> None:
    from vllm.model_executor.custom_op import op_registry_oot

    from adapters.vllm.layers.custom_ops import REPLACEMENTS

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


def register_models(
    table: tuple[Registration, ...] = REGISTRATIONS,
    registry: Any | None = None,
    classes: Mapping[str, str] = MODEL_CLASSES,
) -> None:
    """Our own model classes in vLLM's ModelRegistry, as `module:Class` (imported lazily).

    Only the table's rows of our implementations, each through `classes` (the models
    room's MODEL_CLASSES: architecture -> class path); an architecture vLLM's own model
    serves keeps vLLM's entry. registry: vLLM's ModelRegistry unless given (tests give a
    fresh one).
    """
    rows = ours_only(table)
    if not rows:
        return
    missing = [r.architecture for r in rows if r.architecture not in classes]
    if missing:
        raise ConfigError(
            f"The core's registration table has rows of our own for {', '.join(missing)}, "
            "and the vLLM adapter has no model class for them.",
            "Add each architecture to MODEL_CLASSES in adapters/vllm/models/__init__.py.",
        )
    if registry is None:
        from vllm import ModelRegistry

        registry = ModelRegistry
    for row in rows:
        path = classes[row.architecture]
        current = registry.models.get(row.architecture)
        now = f"{getattr(current, 'module_name', '')}:{getattr(current, 'class_name', '')}"
        if now != path:  # re-entrant: each process's plugin load runs this
            registry.register_model(row.architecture, path)
            logger.debug("registered %s -> %s: %s", row.architecture, path, row.why)


def apply_device_patches(kind: DeviceKind, family: ChipFamily) -> None:
    """The patches the serving device alone calls for; the deployment's come later."""
    from adapters.vllm.patches import apply_plan, device_patch_plan

    apply_plan(device_patch_plan(kind, family))


def register_all(kind: DeviceKind, family: ChipFamily) -> None:
    """Everything our platform needs in vLLM's registries, for the device that serves."""
    register_custom_ops()
    register_attention_backend()
    register_quantization()
    register_models()
    apply_device_patches(kind, family)
