"""The collective-communication port on HCCL, through torch.distributed."""

from __future__ import annotations

from ports.collective import Communicator

HCCL_BACKEND = "hccl"


class HcclCommunicator(Communicator):
    """NPU workers meet in an HCCL process group.

    The "hccl" backend is registered with torch.distributed when torch_npu is
    imported, so this class needs torch_npu only indirectly.
    """

    @property
    def backend(self) -> str:
        return HCCL_BACKEND
