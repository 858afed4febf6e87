"""compressed-tensors int8 layers on our platform: our ScaledMM kernel in vLLM's table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.vllm.patches._symbols import resolve

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec


def add_int8_kernel(spec: PatchSpec) -> None:
    """Our kernel first among the OOT platform's int8 kernels; re-entrant."""
    from vllm.platforms import PlatformEnum

    from adapters.vllm.quantization.scaled_mm import AscendInt8ScaledMMLinearKernel

    table = resolve(spec.target)
    kernels = table.setdefault(PlatformEnum.OOT, [])
    if AscendInt8ScaledMMLinearKernel not in kernels:
        kernels.insert(0, AscendInt8ScaledMMLinearKernel)
