"""The sleep-memory port's torch implementation (adapters/torch/sleep.py) on host tensors:
what is released, what is kept, what comes back, and that the tensors stay the same."""

from __future__ import annotations

import contextlib

import pytest
import torch

from adapters.cpu.sleep import CpuSleepMemory
from adapters.torch.sleep import TorchSleepMemory
from ports.sleep import SleepOutcome, SleepTag

W, KV = SleepTag.WEIGHTS, SleepTag.KV_CACHE


def _offloading() -> TorchSleepMemory:
    """As on a device: offloaded tags go to host memory and come back."""
    return TorchSleepMemory(in_host_memory=False, pin=False, empty_cache=lambda: None)


def _tensors() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    weight = torch.arange(1024, dtype=torch.float32)
    tied = weight.view(32, 32)  # shares the weight's storage: counted once
    kv = torch.full((2048,), 3.0)
    return weight, tied, kv


def test_level_1_keeps_the_weights_and_discards_the_kv_cache() -> None:
    memory = _offloading()
    weight, tied, kv = _tensors()
    memory.track(W, [weight, tied])
    memory.track(KV, [kv])
    outcome = memory.sleep({W})
    assert outcome == SleepOutcome(released_bytes=4096 + 8192, offloaded_bytes=4096)
    assert memory.asleep() == {W, KV}
    assert memory.held_bytes(W) == memory.held_bytes(KV) == 0
    assert weight.untyped_storage().nbytes() == 0  # the same tensor, its memory gone
    memory.wake_up([W])
    assert memory.asleep() == {KV}
    assert torch.equal(weight, torch.arange(1024, dtype=torch.float32))
    assert torch.equal(tied[1], torch.arange(32, 64, dtype=torch.float32))
    memory.wake_up()
    assert memory.asleep() == frozenset() and memory.held_bytes(KV) == 8192
    assert torch.equal(kv, torch.zeros(2048))  # discarded contents come back as zeros


def test_level_2_discards_both() -> None:
    memory = _offloading()
    weight, _, kv = _tensors()
    memory.track(W, [weight])
    memory.track(KV, [kv])
    assert memory.sleep(set()) == SleepOutcome(released_bytes=12288, offloaded_bytes=0)
    memory.wake_up()
    assert not weight.any() and not kv.any()


def test_the_host_leaves_offloaded_weights_in_place() -> None:
    memory = CpuSleepMemory()
    weight, _, kv = _tensors()
    pointer = weight.data_ptr()
    memory.track(W, [weight])
    memory.track(KV, [kv])
    assert memory.sleep({W}) == SleepOutcome(released_bytes=8192, offloaded_bytes=0)
    assert memory.asleep() == {KV} and weight.data_ptr() == pointer
    assert not memory.addresses_kept


def test_tensors_asleep_cannot_be_handed_over_again() -> None:
    memory = _offloading()
    memory.track(KV, [torch.ones(4)])
    memory.sleep(set())
    with pytest.raises(RuntimeError, match="wake them"):
        memory.track(KV, [torch.ones(4)])


def test_sleep_of_some_tags_leaves_the_others_awake() -> None:
    """vLLM's discard (release_kv_cache_memory): the KV cache alone, nothing offloaded."""
    memory = _offloading()
    weight, _, kv = _tensors()
    memory.track(W, [weight])
    memory.track(KV, [kv])
    assert memory.sleep((), tags={KV}) == SleepOutcome(released_bytes=8192, offloaded_bytes=0)
    assert memory.asleep() == {KV} and memory.held_bytes(W) == 4096
    assert memory.sleep({W}).released_bytes == 4096  # the rest, later
    memory.wake_up()
    assert torch.equal(weight, torch.arange(1024, dtype=torch.float32)) and not kv.any()


def test_resizing_needs_no_pool() -> None:
    """Storages of any allocator resize: the worker allocates where it would anyway."""
    assert isinstance(_offloading().allocation_pool(W), contextlib.nullcontext)
