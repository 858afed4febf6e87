"""vLLM's EPLB rearrange on the host: its timing events measured with the host clock.

EplbState.rearrange times itself on the main EP rank with torch.Event(enable_timing=True),
and torch's CPU backend has no events ("cpu backend doesn't support events"), so the first
rebalance (the profile run's) would fail. During rearrange, and only while no accelerator
is available, torch.Event is a host event that records the wall clock; elsewhere torch is
untouched.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from adapters.vllm.patches._symbols import rebind_imported, resolve

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec


class HostTimingEvent:
    """torch.Event's timing calls on the host clock (milliseconds, as torch's)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._at: float | None = None

    def record(self, *args: Any, **kwargs: Any) -> None:
        self._at = time.perf_counter()

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end: HostTimingEvent) -> float:
        assert self._at is not None and end._at is not None
        return (end._at - self._at) * 1000.0


@contextlib.contextmanager
def _host_events() -> Iterator[None]:
    if torch.accelerator.is_available():
        yield
        return
    saved = torch.Event
    try:
        torch.Event = HostTimingEvent  # type: ignore[misc,assignment]
        yield
    finally:
        torch.Event = saved  # type: ignore[misc]


def time_rearrange_on_host(spec: PatchSpec) -> None:
    original = resolve(spec.target)
    if getattr(original, "__ascend_patch__", None) == spec.id:
        return

    @functools.wraps(original)
    def rearrange(*args: Any, **kwargs: Any) -> Any:
        with _host_events():
            return original(*args, **kwargs)

    rearrange.__ascend_patch__ = spec.id  # type: ignore[attr-defined]
    rebind_imported(spec.target, spec.also_rebind, rearrange)
