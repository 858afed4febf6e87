"""The collective port on the host: torch.distributed over gloo."""

from __future__ import annotations

from ports.collective import Communicator


class GlooCommunicator(Communicator):
    """The host's workers meet in a gloo process group."""

    @property
    def backend(self) -> str:
        return "gloo"
