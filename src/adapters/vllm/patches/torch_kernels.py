"""Torch implementations of vLLM's Triton kernels: on a host without Triton, and on the NPU.

Installed through vLLM's kernel-override registry (`vllm.triton_utils.dispatcher.
register_kernels`), which rebinds every reference to the kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from adapters.vllm.kernels import compute_slot_mapping
from adapters.vllm.patches._symbols import dotted
from ascend_core.errors import ConfigError

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec

# Registry target -> our implementation.
IMPLEMENTATIONS: dict[str, Callable[..., Any]] = {
    "vllm.v1.worker.block_table:ComputeSlotMappingKernel.kernel": compute_slot_mapping,
}

_registered: set[str] = set()


def override(spec: PatchSpec) -> None:
    """Register the torch implementation of `spec.target`; once per process."""
    if spec.target in _registered:
        return
    impl = IMPLEMENTATIONS.get(spec.target)
    if impl is None:
        raise ConfigError(
            f"No host implementation of {spec.target} (patch {spec.id}).",
            "disable speculative decoding when serving on the host device",
        )
    from vllm.triton_utils.dispatcher import register_kernels

    register_kernels({dotted(spec.target): impl})
    _registered.add(spec.target)
