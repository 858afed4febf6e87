"""The emulated NPU's HCCL communicator names: which process group a `group_ep` stands for.

On hardware an MC2 op names its communication domain by the HCCL communicator's name
(ProcessGroupHCCL.get_hccl_comm_name(rank)), and a name no live communicator carries is
refused. Here each emulated NPU group is a gloo process group; `comm_name(group, soc)`
gives it a name as that call would (its ranks' chip, by torch_npu's SoC name, with it: the
MC2 kernels' limits are the chip's), and the MC2 ops find the group again by it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

_LIVE: dict[str, tuple[dist.ProcessGroup, str]] = {}


def comm_name(group: dist.ProcessGroup, soc: str = "Ascend910B1") -> str:
    """The HCCL communicator name of `group` on `soc` ranks (kept while the group lives)."""
    for name, (live, chip) in _LIVE.items():
        if live is group and chip == soc:
            return name
    name = f"hccl_comm_{len(_LIVE)}_{dist.get_world_size(group)}ranks"
    _LIVE[name] = (group, soc)
    return name


def group_of(name: str, op: str) -> tuple[dist.ProcessGroup, str]:
    """The process group behind a communicator name and its ranks' SoC; ValueError if no
    live communicator carries the name."""
    if not 1 <= len(name) < 128:
        raise ValueError(f"{op}: group name {name!r} must have 1 to 127 characters")
    group = _LIVE.get(name)
    if group is None:
        raise ValueError(
            f"{op}: {name!r} is not a live HCCL communicator name (live: {sorted(_LIVE) or 'none'})"
        )
    return group


def forget(group: dist.ProcessGroup) -> None:
    """The group was destroyed: its name no longer reaches it."""
    for name in [n for n, (g, _) in _LIVE.items() if g is group]:
        del _LIVE[name]


class EmulatedHcclBackend:
    """What `group._get_backend(torch.device("npu"))` gives under torch_npu: the group's
    ProcessGroupHCCL, of which the emulator models `get_hccl_comm_name(rank)` only."""

    def __init__(self, group: dist.ProcessGroup, soc: str) -> None:
        self._group, self._soc = group, soc

    def get_hccl_comm_name(self, rank: int) -> str:
        if not 0 <= rank < dist.get_world_size():
            raise ValueError(f"get_hccl_comm_name: rank {rank} is outside the world")
        return comm_name(self._group, self._soc)


def install(soc: str) -> None:
    """torch_npu registers HCCL as the `npu` device's backend of every process group; the
    emulated device's groups are gloo, so a group asked for its `npu` backend answers with
    an EmulatedHcclBackend naming it (the MC2 ops then find the gloo group by that name).
    Idempotent; other devices' backends are torch's own."""
    original = dist.ProcessGroup._get_backend
    if getattr(original, "emulated_hccl", False):
        return

    def _get_backend(group: dist.ProcessGroup, device: object) -> object:
        if getattr(device, "type", device) == "npu":
            return EmulatedHcclBackend(group, soc)
        return original(group, device)

    _get_backend.emulated_hccl = True  # type: ignore[attr-defined]
    dist.ProcessGroup._get_backend = _get_backend  # type: ignore[method-assign]
    install_collectives()


def _on_npu(value: object) -> bool:
    if isinstance(value, torch.Tensor):
        return value.device.type == "npu"
    if isinstance(value, list | tuple):
        return any(_on_npu(v) for v in value)
    return False


def _to_host(value: object) -> object:
    if isinstance(value, torch.Tensor):
        return value.cpu() if value.device.type == "npu" else value
    if isinstance(value, list):
        return [_to_host(v) for v in value]
    return value


def _write_back(device: object, host: object) -> None:
    if isinstance(device, torch.Tensor) and device is not host:
        device.copy_(host)  # type: ignore[arg-type]
    elif isinstance(device, list):
        for d, h in zip(device, host, strict=True):  # type: ignore[call-overload]
            _write_back(d, h)


def _staged(original: Callable[..., Any]) -> Callable[..., Any]:
    """`original` (a torch.distributed collective) taking `npu` tensors, as it does on an
    HCCL group: over the emulator's gloo groups they go through host memory and back."""

    def collective(*args: Any, **kwargs: Any) -> Any:
        if not (_on_npu(args) or _on_npu(list(kwargs.values()))):
            return original(*args, **kwargs)
        host_args = [_to_host(a) for a in args]
        host_kwargs = {k: _to_host(v) for k, v in kwargs.items()}
        result = original(*host_args, **host_kwargs)
        for device, host in zip(args, host_args, strict=True):
            _write_back(device, host)
        for key, value in kwargs.items():
            _write_back(value, host_kwargs[key])
        return result

    collective.emulated_hccl = True  # type: ignore[attr-defined]
    return collective


class _StagedP2P:
    """The requests of one staged batch_isend_irecv, as HCCL's are: the first wait of any
    of them waits the gloo batch and copies what arrived into the `npu` tensors; every
    later wait returns at once (a gloo P2P request waited twice never returns)."""

    def __init__(self, requests: list[Any], received: list[tuple[torch.Tensor, torch.Tensor]]):
        self._requests, self._received, self._done = requests, received, False

    def wait(self, timeout: Any = None) -> bool:
        if not self._done:
            for request in self._requests:
                request.wait()
            for tensor, host in self._received:
                tensor.copy_(host)
            self._done = True
        return True

    def is_completed(self) -> bool:
        return self._done


class _StagedRequest:
    """One op's request in a staged batch: waiting it completes the batch."""

    def __init__(self, batch: _StagedP2P) -> None:
        self._batch = batch

    def wait(self, timeout: Any = None) -> bool:
        return self._batch.wait(timeout)

    def is_completed(self) -> bool:
        return self._batch.is_completed()


def _staged_p2p(original: Callable[..., Any]) -> Callable[..., Any]:
    """batch_isend_irecv of `npu` tensors, as HCCL's point-to-point takes them (vLLM's EPLB
    moves expert weights so): over the emulator's gloo groups each send goes from a host
    copy and each receive lands in a host buffer, copied into its `npu` tensor when the
    batch is waited (one request per op, as torch returns them)."""

    def batch_isend_irecv(p2p_ops: list[Any]) -> list[Any]:
        if not any(_on_npu(op.tensor) for op in p2p_ops):
            return original(p2p_ops)  # type: ignore[no-any-return]
        host_ops, received = [], []
        for op in p2p_ops:
            tensor = op.tensor
            host = tensor.cpu() if tensor.device.type == "npu" else tensor
            if getattr(op.op, "__name__", "") == "irecv" and host is not tensor:
                received.append((tensor, host))
            host_ops.append(dist.P2POp(op.op, host, group=op.group, tag=op.tag,
                                       group_peer=op.group_peer))
        batch = _StagedP2P(list(original(host_ops)), received)
        return [_StagedRequest(batch) for _ in p2p_ops]

    batch_isend_irecv.emulated_hccl = True  # type: ignore[attr-defined]
    return batch_isend_irecv


def install_collectives() -> None:
    """torch.distributed's all_to_all_single, all_gather and all_reduce take `npu`
    tensors (torch_npu's HCCL backend does), and so does batch_isend_irecv (HCCL's
    point-to-point); idempotent."""
    for name in ("all_to_all_single", "all_gather", "all_reduce"):
        current = getattr(dist, name)
        if not getattr(current, "emulated_hccl", False):
            setattr(dist, name, _staged(current))
    original = dist.batch_isend_irecv
    if not getattr(original, "emulated_hccl", False):
        staged = _staged_p2p(original)
        dist.batch_isend_irecv = staged
        # Modules that imported it by name before (vLLM's EPLB communicators) call it too.
        for module in list(sys.modules.values()):
            if getattr(module, "batch_isend_irecv", None) is original:
                module.batch_isend_irecv = staged
