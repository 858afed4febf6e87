"""The collective-communication port on HCCL, through torch.distributed."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from ascend_core.visible_devices import VISIBLE_DEVICES_VARIABLE
from ports.collective import Communicator

if TYPE_CHECKING:
    import torch

HCCL_BACKEND = "hccl"


class HcclCommunicator(Communicator):
    """All-reduce over an HCCL process group.

    The "hccl" backend is registered with torch.distributed when torch_npu is
    imported, so this class needs torch_npu only indirectly. `dist` is
    torch.distributed (a fake in tests); `group` None means the default group.
    """

    def __init__(self, dist: ModuleType | None = None, group: Any = None) -> None:
        if dist is None:
            import torch.distributed as dist
        self._dist = dist
        self._group = group

    @property
    def backend(self) -> str:
        return HCCL_BACKEND

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        self._dist.all_reduce(tensor, group=self._group)
        return tensor

    def visible_devices_variable(self) -> str | None:
        return VISIBLE_DEVICES_VARIABLE
