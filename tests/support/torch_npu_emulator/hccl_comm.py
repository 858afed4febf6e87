"""The emulated NPU's HCCL communicator names: which process group a `group_ep` stands for.

On hardware an MC2 op names its communication domain by the HCCL communicator's name
(ProcessGroupHCCL.get_hccl_comm_name(rank)), and a name no live communicator carries is
refused. Here each emulated NPU group is a gloo process group; `comm_name(group, soc)`
gives it a name as that call would (its ranks' chip, by torch_npu's SoC name, with it: the
MC2 kernels' limits are the chip's), and the MC2 ops find the group again by it.
"""

from __future__ import annotations

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
