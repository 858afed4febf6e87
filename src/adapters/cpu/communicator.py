"""The collective port on the host: torch.distributed over gloo."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ports.collective import Communicator


class GlooCommunicator(Communicator):
    """Sums over a gloo process group (the default group unless one is given).

    Without an initialised process group there is one worker, so all_reduce
    returns the tensor unchanged.
    """

    def __init__(self, group: Any = None) -> None:
        self._group = group

    @property
    def backend(self) -> str:
        return "gloo"

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        if self._group is None and not (dist.is_available() and dist.is_initialized()):
            return tensor
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self._group)
        return tensor

    def visible_devices_variable(self) -> str | None:
        """The host has no device mask to set."""
        return None
