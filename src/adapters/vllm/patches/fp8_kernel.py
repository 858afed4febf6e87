"""fp8 layers on our platform: our dequantize-at-load kernel in vLLM's fp8 tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.vllm.patches._symbols import resolve

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec


def add_fp8_kernel(spec: PatchSpec) -> None:
    """Our kernel first among the OOT platform's kernels of the table `spec` names (the
    per-channel or the block fp8 one); re-entrant."""
    from vllm.platforms import PlatformEnum

    from adapters.vllm.quantization.fp8 import AscendFp8DequantLinearKernel

    table = resolve(spec.target)
    kernels = table.setdefault(PlatformEnum.OOT, [])
    if AscendFp8DequantLinearKernel not in kernels:
        kernels.insert(0, AscendFp8DequantLinearKernel)
