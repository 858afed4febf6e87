"""Run an op's host semantics for tensors on the emulated `npu` device.

The MoE and MLA semantics are written for host tensors. On the emulated device their
inputs are `npu` tensors; this copies them to the host, computes, and puts the results
on the inputs' device, as the real op leaves them on the NPU. Only for ops that return
their results (none of these writes into an argument). The copies count as device
transfers in the emulated device's counters; the dense ops, whose sync budget the tests
assert, compute on the device and do not go through here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def _device_of(value: Any) -> torch.device | None:
    if isinstance(value, torch.Tensor):
        return value.device
    if isinstance(value, (list, tuple)):
        for v in value:
            found = _device_of(v)
            if found is not None:
                return found
    return None


def _move(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, list):
        return [_move(v, device) for v in value]
    if isinstance(value, tuple):
        return tuple(_move(v, device) for v in value)
    return value


def on_host(fn: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    """`fn` computed on host copies of its tensor arguments, results on their device."""

    def run(bound: dict[str, Any]) -> Any:
        device = next(
            (d for d in map(_device_of, bound.values()) if d is not None and d.type != "cpu"),
            None,
        )
        if device is None:
            return fn(bound)
        cpu = torch.device("cpu")
        return _move(fn({k: _move(v, cpu) for k, v in bound.items()}), device)

    run.__name__ = getattr(fn, "__name__", "op")
    return run
