"""Checks of the runtime port's graph role on the emulated device (NpuRuntime.graphs(),
adapters/npu/runtime.py over torch_npu's NPUGraph), run in a fresh process by
test_runtime_graphs.py; prints one JSON line of {check: "ok" or the error}."""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/integration
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests

import torch
from npu_graphs.graph_checks import NEW, NPU, OLD, TNPU, attend, inputs, paged, small_model

from adapters.npu.runtime import NpuRuntime

GRAPHS = NpuRuntime(TNPU).graphs()
CHECKS: dict[str, Callable[[], None]] = {}


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


@check
def the_capture_stream_is_the_processs_own_and_current() -> None:
    default = NPU.default_stream()
    stream = GRAPHS.capture_stream()
    assert stream.stream_id != default.stream_id, "a graph is never captured on the default"
    assert GRAPHS.capture_stream() is stream
    assert NPU.current_stream().stream_id == stream.stream_id


@check
def capture_and_replay_through_the_port_follow_inputs_written_in_place() -> None:
    x, w, idx, cache = inputs()
    pool, graph = GRAPHS.pool(), GRAPHS.new_graph()
    with GRAPHS.capture(graph, pool, GRAPHS.capture_stream()):
        output = small_model(x, w, idx, cache)
        weak = GRAPHS.weak_ref(output)
    assert weak.data_ptr() == output.data_ptr()
    del output
    x.mul_(-1)
    cache.zero_()
    GRAPHS.replay(graph)
    got = weak.cpu()
    cache.zero_()
    assert torch.equal(got, small_model(x, w, idx, cache).cpu())


@check
def updatable_attention_takes_new_lengths_only_through_update() -> None:
    p = paged(3)
    graph = GRAPHS.new_graph()
    with GRAPHS.capture(graph, GRAPHS.pool(), GRAPHS.capture_stream(), updatable=True):
        out, _ = attend(p, OLD)
    GRAPHS.update(graph, [{"actual_seq_lengths_kv": NEW}])
    GRAPHS.replay(graph)
    assert torch.equal(out.cpu(), attend(p, NEW)[0].cpu())
    # Captured without the update API, the lengths stay the captured ones: wrong answers.
    stale = GRAPHS.new_graph()
    with GRAPHS.capture(stale, GRAPHS.pool(), GRAPHS.capture_stream()):
        out2, _ = attend(p, OLD)
    GRAPHS.replay(stale)
    assert not torch.allclose(out2.cpu(), attend(p, NEW)[0].cpu())
    try:
        GRAPHS.update(stale, [{"actual_seq_lengths_kv": NEW}])
    except RuntimeError as exc:
        assert "auto_dispatch_capture=True" in str(exc), exc
    else:
        raise AssertionError("update of a graph captured without updatable did not fail")


@check
def a_device_value_read_inside_capture_is_refused() -> None:
    x, *_ = inputs()
    graph = GRAPHS.new_graph()
    try:
        with GRAPHS.capture(graph, GRAPHS.pool(), GRAPHS.capture_stream()):
            int(x.sum().item())  # what the MoE layers' row count did
    except RuntimeError as exc:
        assert "_local_scalar_dense" in str(exc) and "capture" in str(exc), exc
    else:
        raise AssertionError("a scalar read inside a capture did not fail")



def _staged_all_reduce(port: object, x: torch.Tensor, runs: list[int]) -> torch.Tensor:
    """The device communicator's staged all-reduce (adapters/vllm/worker/communicator.py) over a
    one-rank gloo group, through the communicator port; `runs` counts its launches."""
    import torch.distributed as dist

    if not dist.is_initialized():
        store = dist.HashStore()
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)

    def staged() -> torch.Tensor:
        runs.append(1)
        host = x.cpu()
        dist.all_reduce(host)
        x.copy_(host)
        return x

    return port.run_staged(staged)  # type: ignore[attr-defined]


@check
def a_staged_collective_is_recorded_in_the_capture_and_rerun_at_each_replay() -> None:
    """The emulator's stand-in for HCCL records the staged all-reduce (its host copies
    are one device launch, not refused); each replay runs it again over the same memory."""
    from support.torch_npu_emulator.collective import CapturableGlooCommunicator

    x, w, *_ = inputs()
    runs: list[int] = []
    graph = GRAPHS.new_graph()
    with GRAPHS.capture(graph, GRAPHS.pool(), GRAPHS.capture_stream()):
        y = x @ w
        _staged_all_reduce(CapturableGlooCommunicator(), y, runs)
        out = y + 1
    assert len(runs) == 1
    for _ in range(2):
        x.mul_(-2)
        GRAPHS.replay(graph)
    assert len(runs) == 3, runs
    assert torch.equal(out.cpu(), (x @ w).cpu() + 1)


@check
def a_staged_collective_on_a_backend_no_graph_holds_is_refused_in_capture() -> None:
    """The port's default (a device group that takes host tensors, no stand-in): its copy
    to the host is a device-to-host read, refused inside a capture as on a device."""
    from adapters.cpu.communicator import GlooCommunicator

    x, w, *_ = inputs()
    graph = GRAPHS.new_graph()
    try:
        with GRAPHS.capture(graph, GRAPHS.pool(), GRAPHS.capture_stream()):
            _staged_all_reduce(GlooCommunicator(), x @ w, [])
    except RuntimeError as exc:
        assert "capture" in str(exc) and "copy" in str(exc), exc
    else:
        raise AssertionError("a staged collective inside a capture did not fail")


@check
def a_graph_over_memory_released_since_capture_refuses_to_replay() -> None:
    """Sleep mode releases weights and KV cache (storage resized to 0) and gives them new
    memory on waking: a graph still holds the old addresses, so its replay is refused
    (a device would read freed memory) until it is captured again."""
    x, w, idx, cache = inputs()
    graph = GRAPHS.new_graph()
    with GRAPHS.capture(graph, GRAPHS.pool(), GRAPHS.capture_stream()):
        small_model(x, w, idx, cache)
    GRAPHS.replay(graph)
    storage = w.untyped_storage()
    size = storage.nbytes()
    storage.resize_(0)
    storage.resize_(size)
    try:
        GRAPHS.replay(graph)
    except RuntimeError as exc:
        assert "released or moved since its capture" in str(exc), exc
    else:
        raise AssertionError("a graph over moved memory replayed")
    again = GRAPHS.new_graph()
    with GRAPHS.capture(again, GRAPHS.pool(), GRAPHS.capture_stream()):
        small_model(x, w, idx, cache)
    GRAPHS.replay(again)


def main() -> None:
    results: dict[str, str] = {}
    for name, fn in CHECKS.items():
        try:
            fn()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc(limit=6)
    print("CHECKS " + json.dumps(results))


if __name__ == "__main__":
    main()
