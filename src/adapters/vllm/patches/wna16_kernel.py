"""compressed-tensors W4A16 layers on our platform: our WNA16 kernel in vLLM's table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.vllm.patches._symbols import resolve

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec


def add_wna16_kernel(spec: PatchSpec) -> None:
    """Our kernel first among the OOT platform's mixed-precision kernels; re-entrant."""
    from vllm.platforms import PlatformEnum

    from adapters.vllm.quantization.wna16 import AscendW4A16LinearKernel

    table = resolve(spec.target)
    kernels = table.setdefault(PlatformEnum.OOT, [])
    if AscendW4A16LinearKernel not in kernels:
        kernels.insert(0, AscendW4A16LinearKernel)
