"""Collective communication between the workers of one deployment."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Communicator(abc.ABC):
    """The process-group backend a device uses (HCCL on NPU, gloo on the host); vLLM's
    device communicator runs the collectives themselves on that group."""

    @property
    @abc.abstractmethod
    def backend(self) -> str:
        """The torch.distributed backend name."""

    def run_staged(self, collective: Callable[[], T]) -> T:
        """Run one collective that the device communicator stages through host memory
        (its device group's backend takes host tensors only): copies to the host, the
        collective there, the result copied back; returns what `collective` returns.

        Here it simply runs: on a device that captures graphs, its device-to-host copy
        is refused inside a capture, as it would be on the device. A stand-in for a
        device backend that graphs can hold (the emulated NPU's gloo in place of HCCL)
        overrides this to record the collective so that each replay runs it again."""
        return collective()
