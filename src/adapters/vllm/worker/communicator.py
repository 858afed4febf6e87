"""vLLM's device communicator for the NPU platform: its collectives on the device group,
staged through host memory when that group's backend takes host tensors only.

HCCL reduces NPU tensors in place, so on an NPU host every call is vLLM's own. A gloo
device group (no CANN's HCCL, e.g. the emulated NPU in tests) cannot take device tensors:
each collective then copies to the host, runs there, and copies the result back. That
costs a device-to-host copy per collective; it is a fallback, not the NPU's fast path.
Each staged collective runs through the communicator port's `run_staged`: inside a graph
capture the device refuses its host copies, unless the port's backend is one a graph can
hold (the emulated NPU's stand-in for HCCL records it, and each replay runs it again).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from vllm.distributed.device_communicators.base_device_communicator import (
    All2AllManagerBase,
    DeviceCommunicatorBase,
)

from adapters.container import container

HOST_ONLY_BACKENDS = frozenset({"gloo"})
COMMUNICATOR_PATH = "adapters.vllm.worker.communicator.NpuDeviceCommunicator"


class NpuAll2AllManager(All2AllManagerBase):
    """The EP group's all2all manager on the NPU (vLLM's runner asks the EP group for one
    under DP with a MoE model): its naive dispatch and combine move nothing. Under DP
    attention each rank's MoE layers send their own tokens to the experts' ranks and back
    in the layer's method (MC2 or all-to-all through the MoE comm port), so nothing is
    gathered before the layer or reduce-scattered after it; a layer without expert
    parallelism holds every expert (its TP slice) and needs no other rank's tokens."""

    def dispatch_router_logits(
        self,
        hidden_states: torch.Tensor,
        router_logits: torch.Tensor,
        is_sequence_parallel: bool = False,
        extra_tensors: list[torch.Tensor] | None = None,
    ) -> Any:
        if extra_tensors is not None:
            return hidden_states, router_logits, extra_tensors
        return hidden_states, router_logits

    def dispatch(
        self,
        hidden_states: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        is_sequence_parallel: bool = False,
        extra_tensors: list[torch.Tensor] | None = None,
    ) -> Any:
        if extra_tensors is not None:
            return hidden_states, topk_weights, topk_ids, extra_tensors
        return hidden_states, topk_weights, topk_ids

    def combine(
        self, hidden_states: torch.Tensor, is_sequence_parallel: bool = False
    ) -> torch.Tensor:
        return hidden_states

    def destroy(self) -> None:
        pass


class NpuDeviceCommunicator(DeviceCommunicatorBase):
    """DeviceCommunicatorBase, with host staging for a host-only device-group backend;
    the EP group's with NpuAll2AllManager."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        group = self.device_group
        self._through_host = group is not None and dist.get_backend(group) in HOST_ONLY_BACKENDS
        self._port = container().communicator()
        if self.use_all2all:
            self.all2all_manager = NpuAll2AllManager(self.cpu_group)

    def _staged(self, tensor: torch.Tensor) -> bool:
        return self._through_host and tensor.device.type != "cpu"

    def all_reduce(self, input_: torch.Tensor) -> torch.Tensor:
        if not self._staged(input_):
            return super().all_reduce(input_)

        def staged() -> torch.Tensor:
            host = input_.cpu()
            dist.all_reduce(host, group=self.device_group)
            input_.copy_(host)
            return input_

        return self._port.run_staged(staged)

    def all_gather(self, input_: torch.Tensor, dim: int = -1) -> torch.Tensor:
        if not self._staged(input_):
            return super().all_gather(input_, dim)
        base = super().all_gather
        return self._port.run_staged(lambda: base(input_.cpu(), dim).to(input_.device))

    def reduce_scatter(self, input_: torch.Tensor, dim: int = -1) -> torch.Tensor:
        if not self._staged(input_):
            return super().reduce_scatter(input_, dim)
        base = super().reduce_scatter
        return self._port.run_staged(lambda: base(input_.cpu(), dim).to(input_.device))

    def gather(self, input_: torch.Tensor, dst: int = 0, dim: int = -1) -> torch.Tensor | None:
        if not self._staged(input_):
            return super().gather(input_, dst, dim)
        base = super().gather

        def staged() -> torch.Tensor | None:
            out = base(input_.cpu(), dst, dim)
            return None if out is None else out.to(input_.device)

        return self._port.run_staged(staged)

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        if not self._staged(tensor) or self.world_size == 1:
            return super().broadcast(tensor, src)
        base = super().broadcast

        def staged() -> torch.Tensor:
            host = tensor.cpu()
            base(host, src)
            tensor.copy_(host)
            return tensor

        return self._port.run_staged(staged)
