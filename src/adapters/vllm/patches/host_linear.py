"""Unquantized linear layers on the host: vLLM's default GEMM rebound to the host-GEMM port.

vLLM gives a platform that is neither CUDA, ROCm nor its own CPU one plain
`torch.nn.functional.linear`; the host's port (adapters/cpu/host_gemm.py) reads each
weight packed once instead, and hands back the calls it does not take.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from adapters.container import container
from adapters.vllm.patches._symbols import rebind, resolve

if TYPE_CHECKING:
    import torch

    from ascend_core.patches import PatchSpec
    from ports.host_gemm import HostGemm

_in_place: list[HostGemm] = []  # the port vLLM's GEMM calls, once the patch put it there


def make_host_gemm(gemm: HostGemm, fallback: Callable[..., Any]) -> Callable[..., Any]:
    """The GEMM vLLM's linear layers call: the port's, else `fallback` (vLLM's own)."""

    def host_gemm(
        layer: torch.nn.Module,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        out = gemm.linear(layer, x, weight, bias)
        return fallback(layer, x, weight, bias) if out is None else out

    return host_gemm


def use_onednn_gemm(spec: PatchSpec) -> None:
    """Make vLLM's default unquantized GEMM the host-GEMM port's; re-entrant."""
    original = resolve(spec.target)
    if getattr(original, "__ascend_patch__", None) == spec.id:
        return
    port: HostGemm = container().host_gemm()
    if not port.dtypes():
        return  # it serves nothing here (a torch without oneDNN): F.linear stays
    gemm = make_host_gemm(port, original)
    gemm.__ascend_patch__ = spec.id  # type: ignore[attr-defined]
    gemm.__wrapped__ = original  # type: ignore[attr-defined]
    rebind(spec.symbols(), gemm)
    _in_place[:] = [port]


def prepack_weights(model: torch.nn.Module) -> int:
    """Pack every weight the host GEMM will read, right after the load, in module order:
    the weights of unquantized linear layers and of the LM head. Returns how many were
    packed; none where the host GEMM is not in place (the patch off, or it serves none)."""
    if not _in_place:
        return 0
    return _in_place[0].prepack(_gemm_weights(model))


def _gemm_weights(model: torch.nn.Module) -> Iterator[tuple[torch.nn.Module, torch.Tensor]]:
    import torch
    from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import (
        ParallelLMHead,
        UnquantizedEmbeddingMethod,
    )

    for module in model.modules():
        method = getattr(module, "quant_method", None)
        gemm = (isinstance(module, LinearBase) and isinstance(method, UnquantizedLinearMethod)) or (
            isinstance(module, ParallelLMHead) and isinstance(method, UnquantizedEmbeddingMethod)
        )
        weight = getattr(module, "weight", None)
        if gemm and isinstance(weight, torch.Tensor):
            yield module, weight
