"""Checks of the emulated `npu` device, run in a fresh process (test_emulated_npu_device.py).

The device is registered once per process and cannot be unregistered (torch renames
PrivateUse1 for good), so these run away from the rest of the unit tests. Each check
raises on failure; the script prints one JSON line of {check: "ok" or the error}.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from adapters.npu.runtime import NpuRuntime
from ports.runtime import MemoryInfo
from support.emulated_npu_device import counters, reset_counters, syncs
from support.torch_npu_emulator import make_torch_npu

CAPACITY = 1 << 30
TNPU = make_torch_npu(soc_name="Ascend910_9391", device_count=2)
TNPU.npu.total_memory = CAPACITY
EXT = TNPU.npu.device()
CHECKS: dict[str, Callable[[], None]] = {}


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


@check
def tensors_have_device_type_npu_and_compute_on_it() -> None:
    a = torch.arange(12.0, device="npu").view(3, 4)
    b = torch.randn(4, 5).to("npu")
    c = a @ b
    assert (a.device.type, c.device.type) == ("npu", "npu") and c.shape == (3, 5)
    assert torch.allclose(c.cpu(), a.cpu() @ b.cpu())
    picked = a.index_select(0, torch.tensor([2, 0], device="npu"))
    assert picked.cpu().tolist() == [[8, 9, 10, 11], [0, 1, 2, 3]]


@check
def views_and_in_place_slice_writes_share_device_memory() -> None:
    a = torch.zeros(4, 6, device="npu")
    a[1:3, 2:4] = 5.0  # slice view, written in place through the fallback
    a.t()[0].fill_(1.0)  # a transposed view
    rows = a.unbind(0)
    rows[3].add_(2.0)
    host = a.cpu()
    assert host[1:3, 2:4].eq(5).all() and host[:, 0].eq(1 + 2 * (torch.arange(4) == 3)).all()
    assert host[3, 1:].eq(2).all() and a.view(-1).shape == (24,)


@check
def ops_mixing_devices_fail_but_cpu_scalars_mix() -> None:
    a = torch.ones(3, device="npu")
    for other in (torch.ones(3), torch.ones(3, device="npu:1")):
        try:
            a + other
        except RuntimeError as exc:
            assert "same device" in str(exc), exc
        else:
            raise AssertionError(f"npu:0 + {other.device} did not fail")
    assert (a + torch.tensor(2.0)).cpu().eq(3).all()  # a 0-dim CPU tensor is a scalar


@check
def advanced_indexing_takes_cpu_indices_as_torch_does() -> None:
    """torch's rule: indices on the CPU or on the indexed tensor's device (vLLM merges image
    embeddings with a pinned CPU mask); a CPU tensor indexed by device indices still fails."""
    a = torch.zeros(4, 2, device="npu")
    mask = torch.tensor([True, False, False, True])
    a[mask] = torch.ones(2, 2, device="npu")
    assert a.cpu()[:, 0].tolist() == [1, 0, 0, 1] and a[mask].device.type == "npu"
    try:
        torch.zeros(4, 2)[mask.to("npu")] = torch.ones(2, 2)
    except RuntimeError as exc:
        assert "same device" in str(exc), exc
    else:
        raise AssertionError("a CPU tensor took npu indices")


@check
def device_to_host_copies_and_scalar_reads_are_counted() -> None:
    a = torch.arange(6, device="npu")
    reset_counters()
    a.cpu()
    a.sum().item()
    a.tolist()
    a[a > 2]  # nonzero: the host waits for the output size
    c = counters()
    assert (c["d2h_copies"], c["scalar_reads"], c["dynamic_shape_ops"]) == (2, 1, 1), c
    assert syncs(c) == 4 and c["d2h_bytes"] == 2 * 6 * 8


@check
def host_to_device_copies_are_counted_and_device_copies_are_not_syncs() -> None:
    reset_counters()
    x = torch.ones(5).to("npu")
    y = x.clone()
    y.copy_(x)
    c = counters()
    assert (c["h2d_copies"], c["h2d_bytes"], syncs(c)) == (1, 20, 0), c
    assert c["d2d_copies"] == 2, c


@check
def allocated_and_peak_bytes_back_mem_get_info() -> None:
    EXT.reset_peak(0)
    base = EXT.memory(0)["allocated"]
    t = torch.empty(1 << 20, dtype=torch.uint8, device="npu")
    free, total = TNPU.npu.mem_get_info()
    assert total == CAPACITY and free == CAPACITY - base - (1 << 20)
    del t
    assert EXT.memory(0)["allocated"] == base
    assert TNPU.npu.max_memory_allocated() >= base + (1 << 20)
    TNPU.npu.reset_peak_memory_stats()
    assert TNPU.npu.max_memory_allocated() == base
    assert torch.accelerator.get_memory_info() == (CAPACITY - base, CAPACITY)


@check
def allocations_past_the_capacity_fail_as_out_of_memory() -> None:
    try:
        torch.empty(CAPACITY + 1, dtype=torch.uint8, device="npu")
    except torch.OutOfMemoryError as exc:
        assert "emulated NPU out of memory" in str(exc)
    else:
        raise AssertionError("no out-of-memory error")


@check
def two_devices_with_a_device_guard() -> None:
    assert torch.accelerator.device_count() == 2 == TNPU.npu.device_count()
    TNPU.npu.set_device(1)
    try:
        assert torch.empty(1, device="npu").device == torch.device("npu", 1)
        assert TNPU.npu.current_device() == 1
        with torch.device("npu:0"):
            assert torch.empty(1).device == torch.device("npu", 0)
    finally:
        TNPU.npu.set_device(0)
    try:
        TNPU.npu.set_device(2)
    except RuntimeError:
        pass
    else:
        raise AssertionError("set_device(2) of 2 devices did not fail")


@check
def streams_and_events_are_handles() -> None:
    s = TNPU.npu.Stream()
    assert s.device.type == "npu" and s.stream_id != TNPU.npu.default_stream().stream_id
    with TNPU.npu.stream(s):
        assert TNPU.npu.current_stream() == s
    assert TNPU.npu.current_stream() == TNPU.npu.default_stream()
    start, end = TNPU.npu.Event(enable_timing=True), TNPU.npu.Event(enable_timing=True)
    start.record()
    end.record()
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0.0
    s.wait_stream(TNPU.npu.current_stream())


@check
def pinned_host_memory_and_out_arguments() -> None:
    p = torch.empty(8, pin_memory=True)
    assert p.is_pinned()
    out = torch.empty(0, device="npu")
    torch.add(torch.ones(3, device="npu"), 1.0, out=out)  # the out= tensor grows
    assert out.shape == (3,) and out.device.type == "npu" and out.cpu().eq(2).all()
    r = torch.empty(2, device="npu").resize_(4, 4)
    assert r.shape == (4, 4)


def _refused(fn: Callable[[], object], *words: str) -> str:
    try:
        fn()
    except RuntimeError as e:
        text = str(e)
        assert all(w in text for w in words), text
        return text
    raise AssertionError(f"not refused: {words}")


@check
def a_pinned_buffer_rewritten_while_its_copy_is_in_flight_is_refused() -> None:
    """A non_blocking copy from pinned memory is in flight until the host orders it (a
    synchronisation of its stream, of the device, or of an event recorded after it, or a
    blocking read on its stream): a host write of its bytes before then fails, at the next
    copy from that memory or at the ordering, as the device may send the new bytes."""
    npu = TNPU.npu
    host = torch.zeros(64, dtype=torch.int64, pin_memory=True)
    dev = torch.zeros(64, dtype=torch.int64, device="npu")
    # Step N's copy; step N+1 rewrites the buffer and copies: refused at that copy.
    host[:8] = 1
    dev.copy_(host, non_blocking=True)
    host[:8] = 2
    text = _refused(lambda: dev.copy_(host, non_blocking=True), "in flight", "byte 0 ")
    assert f"({host.nbytes} bytes)" in text and "Event" not in text, text
    # Rewritten, then ordered: refused at the synchronisation that ordered it.
    dev[8:16].copy_(host[8:16], non_blocking=True)
    host[11] = 7
    _refused(npu.synchronize, "byte 88 ", "torch.npu.synchronize()")
    assert EXT.in_flight() == 0
    # The ordered sequence passes: each step waits for the last copy's event first.
    event = npu.Event()
    for step in range(4):
        if step:
            event.synchronize()
        host[:] = step
        dev.copy_(host, non_blocking=True)
        event.record()
    assert EXT.in_flight() == 1 and dev.cpu().eq(3).all()
    assert EXT.in_flight() == 0  # the blocking read ordered the stream
    # Through a side stream: it waited for the copy's stream, its event orders the copy.
    side = npu.Stream()
    dev.copy_(host, non_blocking=True)
    side.wait_stream(npu.current_stream())
    done = npu.Event()
    done.record(side)
    done.synchronize()
    host[:] = 9
    dev.copy_(host, non_blocking=True)
    # Another stream's synchronisation orders nothing of this one.
    host[0] = 10
    side.synchronize()
    _refused(lambda: dev.copy_(host, non_blocking=True), "in flight", "byte 0 ")
    # Same bytes written again, a pageable source, a non-overlapping slice: no refusal.
    npu.synchronize()
    dev[:8].copy_(host[:8], non_blocking=True)
    host[:8] = host[:8].clone()
    host[8:] = 11
    dev[8:].copy_(host[8:], non_blocking=True)
    dev[:8].copy_(host[:8], non_blocking=True)
    pageable = torch.ones(64, dtype=torch.int64)
    dev.copy_(pageable, non_blocking=True)
    pageable.fill_(2)
    npu.current_stream().synchronize()
    assert EXT.in_flight() == 0 and dev.cpu().eq(1).all()


@check
def the_v2_decode_tails_arena_is_rewritten_only_after_its_last_copy_ran() -> None:
    """V2DecodeTail stages each step in one pinned arena: without its event the next
    step's write is refused (the hazard under async scheduling); with it each step waits
    for the last copy's event first (already reached on the emulated NPU), and the one
    copy a step is unchanged (the V1 runner's arena records vLLM's own input event)."""
    import numpy as np

    from adapters.vllm.worker.v2_decode_tail import V2DecodeTail

    npu = TNPU.npu
    dev = torch.device("npu", 0)
    unordered = V2DecodeTail(8, None, None, dev, True)
    unordered.stage(np.array([1, 2, 3]), np.array([1, 1, 1]))
    _refused(lambda: unordered.stage(np.array([4, 5]), np.array([1, 1])), "in flight")
    npu.synchronize()
    tail = V2DecodeTail(8, None, None, dev, True, event=npu.Event())
    reset_counters()
    for step in range(3):
        slots = tail.stage(np.arange(step, step + 3), np.array([1, 0, 1]))
        assert slots.cpu().tolist() == [step, step + 1, step + 2]
        tail.stage(np.arange(step + 3, step + 5), None)  # a step the tail does not serve
    assert tail.arena.waits == 5 and counters()["h2d_copies"] == 6
    assert tail.device.cpu()[0, :2].tolist() == [5, 6] and EXT.in_flight() == 0


@check
def npu_runtime_runs_on_the_device() -> None:
    rt = NpuRuntime(TNPU)
    assert rt.device(1) == torch.device("npu", 1)
    assert rt.device_count() == 2 and rt.device_name() == "Ascend910_9391"
    rt.set_device(0)
    rt.reset_peak_memory()
    info = rt.memory_info()
    assert isinstance(info, MemoryInfo) and info.total_bytes == CAPACITY
    assert info.free_bytes == CAPACITY - EXT.memory(0)["allocated"]
    before = rt.allocated_bytes()
    held = torch.empty(1 << 20, dtype=torch.int8, device="npu:0")
    assert rt.allocated_bytes() == before + (1 << 20) == EXT.memory(0)["allocated"]
    del held
    assert rt.allocated_bytes() == before
    rt.synchronize()
    rt.empty_cache()
    rt.seed(7)
    assert TNPU.npu.seeded == 7
    assert rt.current_stream() == rt.current_stream()
    with rt.runner_scope():
        assert torch.cuda.Stream is TNPU.npu.Stream
        torch.cuda.synchronize()
    assert torch.cuda.Stream is not TNPU.npu.Stream  # restored outside the scope



@check
def sleep_memory_releases_device_memory_and_a_released_tensor_refuses_use() -> None:
    """The sleep-memory port on the device: released storages leave the device's books,
    an op on one fails, and waking restores the offloaded contents."""
    from adapters.npu.sleep import NpuSleepMemory
    from ports.sleep import SleepTag

    weight = torch.arange(4096.0, device="npu")
    kv = torch.ones(8192, device="npu")
    before = EXT.memory(0)["allocated"]
    memory = NpuSleepMemory(TNPU)
    memory.track(SleepTag.WEIGHTS, [weight])
    memory.track(SleepTag.KV_CACHE, [kv])
    outcome = memory.sleep({SleepTag.WEIGHTS})
    assert (outcome.released_bytes, outcome.offloaded_bytes) == (16384 + 32768, 16384)
    assert EXT.memory(0)["allocated"] == before - 16384 - 32768
    try:
        (weight + 1).sum()
    except RuntimeError as exc:
        assert "device memory was released" in str(exc), exc
    else:
        raise AssertionError("an op on released device memory ran")
    memory.wake_up()
    assert EXT.memory(0)["allocated"] == before
    assert torch.equal(weight.cpu(), torch.arange(4096.0)) and not kv.cpu().any()
    assert not memory.addresses_kept  # the allocator chooses the address anew


@check
def vmm_sleep_pool_keeps_addresses_and_captured_graphs_replay_after_waking() -> None:
    """The NPU's sleep pool (adapters/npu/vmm_pool.py with native/vmm_pool.cpp built into
    the device against its emulated ACL): tensors allocated in the pool keep their address
    through a sleep, their physical memory leaves the books, an op on one while asleep
    fails with the reason, and a graph captured before the sleep replays after waking."""
    from adapters.npu.vmm_pool import NpuVmmSleepMemory
    from ports.sleep import SleepTag

    memory = NpuVmmSleepMemory(TNPU, EXT.__file__)
    assert memory.addresses_kept
    before = EXT.memory(0)["allocated"]
    with memory.allocation_pool(SleepTag.WEIGHTS):
        weight = torch.arange(4096.0, device="npu")
    with memory.allocation_pool(SleepTag.KV_CACHE):
        kv = torch.ones(8192, device="npu")
    outside = torch.zeros(4096, device="npu")  # outside the pools: not released
    pooled = EXT.memory(0)["allocated"] - before - 16384
    assert pooled == 16384 + 32768, pooled  # page-granular: these sizes are whole pages
    memory.track(SleepTag.WEIGHTS, [weight])
    memory.track(SleepTag.KV_CACHE, [kv])
    try:
        memory.track(SleepTag.WEIGHTS, [outside])
    except RuntimeError as exc:
        assert "were not allocated in sleep mode's 'weights' pool" in str(exc), exc
    else:
        raise AssertionError("a tensor outside the pool was taken")
    graph = TNPU.npu.NPUGraph()
    with TNPU.npu.graph(graph):
        out = (weight * 2 + kv[:4096]).sum()
    pointers = (weight.data_ptr(), kv.data_ptr())
    outcome = memory.sleep({SleepTag.WEIGHTS})
    assert (outcome.released_bytes, outcome.offloaded_bytes) == (16384 + 32768, 16384)
    assert EXT.memory(0)["allocated"] == before + 16384 + graph.info()["pool_bytes"]
    assert memory.held_bytes(SleepTag.WEIGHTS) == memory.held_bytes(SleepTag.KV_CACHE) == 0
    for use in (lambda: (weight + 1).sum(), graph.replay):
        try:
            use()
        except RuntimeError as exc:
            assert "device memory was released" in str(exc), exc
            assert "aclrtUnmapMem" in str(exc), exc
        else:
            raise AssertionError("an op on unmapped device memory ran")
    memory.wake_up([SleepTag.WEIGHTS])
    assert memory.asleep() == {SleepTag.KV_CACHE}
    memory.wake_up()
    assert (weight.data_ptr(), kv.data_ptr()) == pointers
    assert torch.equal(weight.cpu(), torch.arange(4096.0)) and not kv.cpu().any()
    kv.fill_(1.0)
    graph.replay()  # captured before the sleep, over the same addresses
    assert out.item() == 2 * sum(range(4096)) + 4096
    # The level-2 way: nothing offloaded, discarded tags come back as zeros.
    assert memory.sleep(set(), tags={SleepTag.WEIGHTS}).offloaded_bytes == 0
    memory.wake_up()
    assert not weight.cpu().any()
    graph.reset()
    weight = kv = torch.empty(0)  # the pooled tensors gone
    assert EXT.vmm_mapped_bytes()["mapped_bytes"] == 0  # freed through the pool's allocator


def main() -> None:
    results = {}
    for name, fn in CHECKS.items():
        try:
            fn()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc(limit=4)
    print("CHECKS " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
