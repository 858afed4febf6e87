"""FakeHostGemm: the host-GEMM port as F.linear for float32, recording packs and calls."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ports.host_gemm import HostGemm

if TYPE_CHECKING:
    import torch


class FakeHostGemm(HostGemm):
    """Serves `dtypes` (a tuple of torch dtypes) with torch.nn.functional.linear; declines
    the rest. `packed` lists the layers prepack saw, `calls` the layers linear served."""

    def __init__(self, dtypes: tuple[Any, ...]) -> None:
        self._dtypes = dtypes
        self.packed: list[torch.nn.Module] = []
        self.calls: list[torch.nn.Module] = []

    def dtypes(self) -> tuple[torch.dtype, ...]:
        return self._dtypes

    def prepack(self, layers: Iterable[tuple[torch.nn.Module, torch.Tensor]]) -> int:
        for layer, weight in layers:
            if weight.dtype in self._dtypes:
                self.packed.append(layer)
        return len(self.packed)

    def linear(
        self,
        layer: torch.nn.Module,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
    ) -> torch.Tensor | None:
        if weight.dtype not in self._dtypes:
            return None
        import torch.nn.functional as F

        self.calls.append(layer)
        return F.linear(x, weight, bias)
