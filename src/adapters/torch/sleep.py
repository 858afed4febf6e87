"""The sleep-memory port in torch (adapters/cpu and adapters/npu both take it): a tracked
tensor's memory is released by resizing its storage to 0 bytes and given back by resizing
it again, so the tensor objects the model, the runner and vLLM hold stay the same.

Waking gives new memory at a new address (the caching allocator decides), so graphs
captured over the old addresses must be captured again (`addresses_kept` is False).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterable

import attrs
import torch

from ports.sleep import SleepMemory, SleepOutcome, SleepTag


@attrs.define
class _Held:
    """One storage handed over: its size, and its contents in host memory while asleep."""

    storage: torch.UntypedStorage
    nbytes: int
    backup: torch.Tensor | None = None


def _bytes_view(storage: torch.UntypedStorage) -> torch.Tensor:
    """A uint8 tensor over the whole storage (no copy)."""
    view = torch.empty(0, dtype=torch.uint8, device=storage.device)
    return view.set_(storage, 0, (storage.nbytes(),), (1,))


class TorchSleepMemory(SleepMemory):
    """Storages released with `resize_(0)`, offloaded tags copied to host memory first.

    `in_host_memory`: the device's memory is host memory (the host device), so an
    offloaded tag is left where it is: a copy to host memory would hold the same bytes
    twice. `pin`: host copies in pinned memory (fast copies back to a device).
    `empty_cache`: returns the freed blocks of the device's caching allocator.
    """

    def __init__(
        self, *, in_host_memory: bool, pin: bool, empty_cache: Callable[[], None]
    ) -> None:
        self._in_host_memory = in_host_memory
        self._pin = pin
        self._empty_cache = empty_cache
        self._held: dict[SleepTag, list[_Held]] = {}
        self._asleep: set[SleepTag] = set()

    @property
    def addresses_kept(self) -> bool:
        return False

    def allocation_pool(self, tag: SleepTag) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # storages of any allocator can be resized

    def track(self, tag: SleepTag, tensors: Iterable[torch.Tensor]) -> None:
        if tag in self._asleep:
            raise RuntimeError(
                f"the {tag.value} are asleep; wake them (wake_up) before handing them over again"
            )
        seen: set[int] = set()
        held: list[_Held] = []
        for tensor in tensors:
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if storage.nbytes() == 0 or key in seen:
                continue  # shared storage (views, tied weights) counted once
            seen.add(key)
            held.append(_Held(storage, storage.nbytes()))
        self._held[tag] = held

    def sleep(
        self, offload: Collection[SleepTag], tags: Collection[SleepTag] | None = None
    ) -> SleepOutcome:
        released = offloaded = 0
        for tag, held in self._held.items():
            if tag in self._asleep or (tags is not None and tag not in tags):
                continue
            keep = tag in offload
            if keep and self._in_host_memory:
                continue  # already in host memory: nothing to release
            for h in held:
                if keep:
                    h.backup = _bytes_view(h.storage).to("cpu", copy=True)
                    if self._pin:
                        h.backup = h.backup.pin_memory()
                    offloaded += h.nbytes
                h.storage.resize_(0)
                released += h.nbytes
            self._asleep.add(tag)
        self._empty_cache()
        return SleepOutcome(released_bytes=released, offloaded_bytes=offloaded)

    def wake_up(self, tags: Collection[SleepTag] | None = None) -> None:
        for tag in list(self._asleep):
            if tags is not None and tag not in tags:
                continue
            for h in self._held[tag]:
                h.storage.resize_(h.nbytes)
                view = _bytes_view(h.storage)
                if h.backup is not None:
                    view.copy_(h.backup)
                    h.backup = None
                else:
                    view.zero_()
            self._asleep.discard(tag)

    def asleep(self) -> frozenset[SleepTag]:
        return frozenset(self._asleep)

    def held_bytes(self, tag: SleepTag) -> int:
        return sum(h.storage.nbytes() for h in self._held.get(tag, ()))
