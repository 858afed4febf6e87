"""Collective communication between the workers of one deployment."""

from __future__ import annotations

import abc


class Communicator(abc.ABC):
    """The process-group backend a device uses (HCCL on NPU, gloo on the host); vLLM's
    device communicator runs the collectives themselves on that group."""

    @property
    @abc.abstractmethod
    def backend(self) -> str:
        """The torch.distributed backend name."""
