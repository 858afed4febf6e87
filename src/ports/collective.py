"""Collective communication between the workers of one deployment."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class Communicator(abc.ABC):
    """The process-group backend a device uses (HCCL on NPU, gloo on the host)."""

    @property
    @abc.abstractmethod
    def backend(self) -> str:
        """The torch.distributed backend name."""

    @abc.abstractmethod
    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` across the group, in place; returns it."""

    @abc.abstractmethod
    def visible_devices_variable(self) -> str | None:
        """The environment variable that restricts visible devices, if any."""
