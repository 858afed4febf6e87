"""The host GEMM: unquantized linear layers with each weight prepared (packed) once."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    import torch


class HostGemm(abc.ABC):
    """y = x @ weight.T + bias for a layer's dense weight, read from a pack made once per
    weight (and again after the weight changes); the dense weight stays as it is."""

    @abc.abstractmethod
    def dtypes(self) -> tuple[torch.dtype, ...]:
        """The weight dtypes it serves on this machine; empty where it serves none (the
        caller keeps its own GEMM)."""

    @abc.abstractmethod
    def prepack(self, layers: Iterable[tuple[torch.nn.Module, torch.Tensor]]) -> int:
        """Pack each (layer, weight) it serves now, in the order given (right after a
        load, so the packs lie together); returns how many it packed."""

    @abc.abstractmethod
    def linear(
        self,
        layer: torch.nn.Module,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
    ) -> torch.Tensor | None:
        """x [..., K] @ weight [N, K].T (+ bias [N]) -> [..., N], the pack cached on
        `layer`; None where it does not take this call (the caller's GEMM runs)."""
