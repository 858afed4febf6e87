"""Sleep memory: freeing and restoring the device memory of an engine's weights and KV cache."""

from __future__ import annotations

import abc
import enum
from collections.abc import Collection, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from attrs import frozen

if TYPE_CHECKING:
    import torch


class SleepTag(enum.Enum):
    """What a worker hands over: vLLM's allocation tags of sleep mode."""

    WEIGHTS = "weights"
    KV_CACHE = "kv_cache"


@frozen
class SleepOutcome:
    """What one sleep did, in bytes: device memory released, and the part of it kept in
    host memory to be restored on waking (the offloaded tags' contents)."""

    released_bytes: int
    offloaded_bytes: int


class SleepMemory(abc.ABC):
    """Frees and restores the device memory of the tensors a worker hands over, by tag.

    The tensors stay the same objects (the model and the runner keep them); their memory
    comes back on waking, not necessarily at the same address, so `addresses_kept` says
    whether captured graphs stay valid or must be captured again. An implementation that
    keeps addresses takes the tensors from its own pool (`allocation_pool`).
    """

    @abc.abstractmethod
    def allocation_pool(self, tag: SleepTag) -> AbstractContextManager[None]:
        """Where the worker allocates the tensors of `tag` (loading the model, making the KV
        cache): a pool that sleeps as a whole, or no pool at all (nullcontext)."""

    @abc.abstractmethod
    def track(self, tag: SleepTag, tensors: Iterable[torch.Tensor]) -> None:
        """The tensors of `tag` (replacing those handed over before)."""

    @abc.abstractmethod
    def sleep(
        self, offload: Collection[SleepTag], tags: Collection[SleepTag] | None = None
    ) -> SleepOutcome:
        """Release the memory of the tracked tensors of `tags` (all when None; those asleep
        already are left), keeping the contents of the `offload` tags in host memory; the
        others' contents are discarded (vLLM's `discard`: `tags` alone, none offloaded)."""

    @abc.abstractmethod
    def wake_up(self, tags: Collection[SleepTag] | None = None) -> None:
        """Give the tensors of `tags` (all when None) memory again, with their offloaded
        contents restored (zeros where discarded)."""

    @abc.abstractmethod
    def asleep(self) -> frozenset[SleepTag]:
        """The tags whose memory is released now."""

    @abc.abstractmethod
    def held_bytes(self, tag: SleepTag) -> int:
        """Device bytes the tensors of `tag` hold now."""

    @property
    @abc.abstractmethod
    def addresses_kept(self) -> bool:
        """Whether waking gives each tensor its memory back at the same address."""
