"""Checks of NPU graphs on the emulated device, run in a fresh process (test_npu_graphs.py).

The emulated device is registered once per process and cannot be unregistered, so these
run away from the rest of the tests. Each check raises on failure; the script prints one
JSON line of {check: "ok" or the error}. Argument: check names to run (default: all).
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from support.emulated_npu_device import counters, launch_sources, reset_counters
from support.torch_npu_emulator import make_torch_npu

TNPU = make_torch_npu(device_count=2)
NPU = TNPU.npu
EXT = NPU.device()
CHECKS: dict[str, Callable[[], None]] = {}


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


def refused(body: Callable[[], Any], *needles: str) -> str:
    """Captures `body` and returns the error; it must name every needle."""
    graph = NPU.NPUGraph()
    try:
        with NPU.graph(graph):
            body()
    except RuntimeError as exc:
        text = str(exc)
        for needle in needles:
            assert needle in text, f"{needle!r} not in: {text}"
        assert "capture" in text, text
        return text
    raise AssertionError(f"capture of {body} did not fail")


# -- a small computation ---------------------------------------------------------------


def small_model(x: torch.Tensor, w: torch.Tensor, idx: torch.Tensor, cache: torch.Tensor):
    h = torch.nn.functional.silu(x @ w)  # fresh outputs from the graph's pool
    h[:, :2].mul_(0.5)  # an in-place write through a view
    picked = h.index_select(0, idx)  # gather by device indices
    cache[1:3].copy_(picked[:2])  # a write into memory outside the pool
    return picked.softmax(dim=-1) + cache.sum(0)


def inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 8, generator=g).to("npu")
    w = torch.randn(8, 8, generator=g).to("npu")
    idx = torch.tensor([5, 0, 3], device="npu")
    cache = torch.zeros(4, 8, device="npu")
    return x, w, idx, cache


@check
def replay_gives_eagers_result_after_inputs_change_in_place() -> None:
    x, w, idx, cache = inputs()
    graph = NPU.NPUGraph()
    with NPU.graph(graph):
        out = small_model(x, w, idx, cache)
    for step in range(3):
        g = torch.Generator().manual_seed(step + 1)
        x.copy_(torch.randn(6, 8, generator=g))
        idx.copy_(torch.randint(0, 6, (3,), generator=g))
        cache.zero_()
        graph.replay()
        got, got_cache = out.cpu(), cache.cpu()
        cache.zero_()
        want = small_model(x, w, idx, cache).cpu()
        assert torch.allclose(got, want) and torch.allclose(got_cache, cache.cpu()), step
    assert graph.info()["captured"] == 1 and graph.info()["nodes"] >= 6


@check
def capture_memory_comes_from_the_pool_and_replay_allocates_nothing() -> None:
    x, w, idx, cache = inputs()
    NPU.reset_peak_memory_stats()
    before = EXT.memory(0)
    graph = NPU.NPUGraph()
    with NPU.graph(graph):
        out = small_model(x, w, idx, cache)
    info, mem = graph.info(), EXT.memory(0)
    assert info["pool_bytes"] > 0 and info["pool_free_bytes"] > 0, info  # freed, kept
    assert mem["graph_pools"] - before["graph_pools"] == info["pool_bytes"], (mem, info)
    assert mem["allocated"] - before["allocated"] == info["pool_bytes"], (mem, before)
    assert NPU.mem_get_info()[0] == mem["capacity"] - mem["allocated"]
    NPU.reset_peak_memory_stats()
    settled = EXT.memory(0)
    for _ in range(3):
        graph.replay()
    after = EXT.memory(0)
    keys = ("allocated", "allocations", "peak", "graph_pools")
    assert [after[k] for k in keys] == [settled[k] for k in keys], (settled, after)
    del out
    graph.reset()
    assert EXT.memory(0)["graph_pools"] == before["graph_pools"]
    assert EXT.memory(0)["allocated"] == before["allocated"], (EXT.memory(0), before)


@check
def graphs_sharing_a_pool_reuse_its_free_blocks() -> None:
    x, w, idx, cache = inputs()
    pool = NPU.graph_pool_handle()
    first, second = NPU.NPUGraph(), NPU.NPUGraph()
    with NPU.graph(first, pool=pool):
        small_model(x, w, idx, cache)  # the output is dropped: its block goes back to the pool
    alone = first.info()["pool_bytes"]
    with NPU.graph(second, pool=pool):
        out = small_model(x, w, idx, cache)
    assert first.pool() == second.pool() == pool
    assert second.info()["pool_bytes"] == alone, (alone, second.info())  # nothing new taken
    first.replay()
    second.replay()
    want = small_model(x, w, idx, cache)
    assert torch.allclose(out.cpu(), want.cpu())
    first.reset()
    assert second.info()["pool_bytes"] == alone  # the pool lives while a graph uses it
    second.reset()


READS: dict[str, tuple[Callable[[torch.Tensor], Any], tuple[str, ...]]] = {
    "item": (lambda t: t.sum().item(), ("aten::_local_scalar_dense", ".item()")),
    "bool": (lambda t: bool(t.sum() > 0), ("aten::_local_scalar_dense", "bool(t)")),
    "tolist": (lambda t: t.tolist(), ("device-to-host copy", ".tolist()")),
    "cpu": (lambda t: t.cpu(), ("aten::_copy_from", "device-to-host copy", ".cpu()")),
    "host_tensor_from_device_data": (
        lambda t: torch.as_tensor(t, device="cpu"),
        ("device-to-host copy", "a host tensor made from device data"),
    ),
    "pageable_host_to_device_copy": (
        lambda t: t.add_(torch.ones(8).to("npu")),
        ("aten::_copy_from", "host-to-device copy from pageable host memory"),
    ),
    "nonzero": (lambda t: t.nonzero(), ("aten::nonzero", "output size")),
    "masked_select": (lambda t: t.masked_select(t > 0), ("aten::masked_select", "output size")),
    "unique": (lambda t: torch.unique(t), ("aten::_unique2", "output size")),
    "boolean_mask_index": (lambda t: t[t > 0], ("aten::nonzero", "output size")),
    "repeat_interleave": (
        lambda t: torch.repeat_interleave(t.abs().long()),
        ("aten::repeat_interleave", "output_size"),
    ),
    "synchronize": (lambda t: NPU.synchronize(), ("device synchronisation",)),
    "stream_synchronize": (
        lambda t: NPU.current_stream().synchronize(),
        ("stream synchronisation",),
    ),
}


@check
def every_refusal_raises_with_the_ops_name() -> None:
    t = torch.arange(-3.0, 5.0, device="npu")
    for case, (body, needles) in READS.items():
        try:
            refused(lambda body=body: body(t), *needles)
        except AssertionError as exc:
            raise AssertionError(f"{case}: {exc}") from None
    # The same work outside a capture runs (and counts its syncs).
    reset_counters()
    t.sum().item()
    assert counters()["scalar_reads"] == 1


@check
def repeat_interleave_with_output_size_is_captured() -> None:
    reps = torch.tensor([1, 2, 0, 3], device="npu")
    graph = NPU.NPUGraph()
    with NPU.graph(graph):
        out = torch.repeat_interleave(reps, output_size=6)
    reps.copy_(torch.tensor([0, 3, 3, 0]))
    graph.replay()
    assert out.cpu().tolist() == [1, 1, 1, 2, 2, 2]


@check
def a_copy_from_pinned_memory_is_captured_and_reads_the_host_buffer_at_replay() -> None:
    host = torch.arange(4.0).pin_memory()
    dev = torch.zeros(4, device="npu")
    graph = NPU.NPUGraph()
    with NPU.graph(graph):
        dev.copy_(host, non_blocking=True)
        out = dev * 2
    host.fill_(5.0)  # the captured copy reads the pinned buffer when the replay runs
    graph.replay()
    assert out.cpu().tolist() == [10.0] * 4


@check
def a_side_stream_not_joined_back_fails_the_capture() -> None:
    x = torch.ones(4, device="npu")

    def fork_without_join() -> None:
        side = NPU.Stream()
        side.wait_stream(NPU.current_stream())  # forks `side` into the capture
        with NPU.stream(side):
            x.mul_(2)

    text = refused(fork_without_join, "not joined back", "aten::mul")
    assert "wait_stream" in text


@check
def a_side_stream_joined_back_is_captured() -> None:
    x = torch.ones(4, device="npu")
    y = torch.zeros(4, device="npu")
    graph = NPU.NPUGraph()
    with NPU.graph(graph):
        main = NPU.current_stream()
        side = NPU.Stream()
        side.wait_stream(main)
        with NPU.stream(side):
            y.copy_(x * 3)
        main.wait_stream(side)
        out = y + 1
    x.fill_(2.0)
    graph.replay()
    assert out.cpu().tolist() == [7.0] * 4


@check
def capture_state_and_default_stream() -> None:
    graph = NPU.NPUGraph()
    assert not NPU.is_current_stream_capturing()
    with NPU.graph(graph):
        assert NPU.is_current_stream_capturing()
        torch.ones(2, device="npu").add_(1)
    assert not NPU.is_current_stream_capturing()
    other = NPU.NPUGraph()
    try:
        other.capture_begin()  # on the default stream
    except RuntimeError as exc:
        assert "must be captured on a non-default stream" in str(exc), exc
    else:
        raise AssertionError("capture on the default stream did not fail")
    try:
        with NPU.stream(NPU.Stream()):
            graph.capture_begin()
    except RuntimeError as exc:
        assert "already owns a captured graph" in str(exc), exc
    else:
        raise AssertionError("a second capture into a captured graph did not fail")
    try:
        NPU.NPUGraph().replay()
    except RuntimeError as exc:
        assert "without a preceding successful capture" in str(exc)
    else:
        raise AssertionError("replay of an empty graph did not fail")


# -- the fused attention op's host-side lengths ---------------------------------------------

HEADS, D, BLOCK = 2, 16, 16


def paged(seed: int = 0) -> dict[str, Any]:
    """A BSH paged decode of two sequences over a 6-block cache."""
    g = torch.Generator().manual_seed(seed)
    return {
        "query": torch.randn(2, 1, HEADS * D, generator=g).half().to("npu"),
        "cache": torch.randn(6, BLOCK, HEADS * D, generator=g).half().to("npu"),
        "table": torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32).to("npu"),
    }


def attend(p: dict[str, Any], lengths: list[int], out_overload: bool = False, **extra: Any) -> Any:
    op = TNPU.npu_fused_infer_attention_score
    return (op.out if out_overload else op)(
        p["query"],
        p["cache"],
        p["cache"],
        num_heads=HEADS,
        input_layout="BSH",
        block_table=p["table"],
        block_size=BLOCK,
        scale=D**-0.5,
        actual_seq_lengths_kv=lengths,
        **extra,
    )


OLD, NEW = [5, 40], [33, 9]


@check
def stale_lengths_give_a_different_answer_unless_the_task_group_is_updated() -> None:
    p = paged()
    want_old, want_new = attend(p, OLD)[0].cpu(), attend(p, NEW)[0].cpu()
    assert not torch.allclose(want_old, want_new)
    graph, update_stream = NPU.NPUGraph(), NPU.Stream()
    event = NPU.ExternalEvent()
    lengths = list(OLD)
    with NPU.graph(graph):
        stream = NPU.current_stream()
        workspace = TNPU._npu_fused_infer_attention_score_get_max_workspace(
            p["query"],
            p["cache"],
            p["cache"],
            num_heads=HEADS,
            input_layout="BSH",
            block_table=p["table"],
            block_size=BLOCK,
            actual_seq_lengths_kv=lengths,
        )
        out = torch.empty_like(p["query"])
        lse = torch.empty(1, device="npu")
        event.wait(stream)
        event.reset(stream)
        NPU.graph_task_group_begin(stream)
        attend(p, lengths, workspace=workspace, out=[out, lse], out_overload=True)
        handle = NPU.graph_task_group_end(stream)
    lengths[:] = NEW  # the caller's list changes: the captured launch keeps its copy

    # Replayed with the event recorded but no update: the captured lengths.
    event.record(update_stream)
    graph.replay()
    assert torch.equal(out.cpu(), want_old), "a stale replay must keep the captured lengths"
    assert not torch.allclose(out.cpu(), want_new)

    # Updated (the documented flow), then replayed: the new lengths.
    with NPU.stream(update_stream):
        NPU.graph_task_update_begin(update_stream, handle)
        attend(p, NEW, workspace=workspace, out=[out, lse], out_overload=True)
        NPU.graph_task_update_end(update_stream)
        event.record(update_stream)
    out.zero_()
    graph.replay()
    assert torch.equal(out.cpu(), want_new)


@check
def replay_waits_for_the_external_event_until_the_update_records_it() -> None:
    # vllm-ascend's order: replay first, then update the lengths and record the event,
    # which releases the replay's wait.
    p = paged(1)
    want = attend(p, NEW)[0].cpu()
    graph = NPU.NPUGraph()
    with NPU.graph(graph, auto_dispatch_capture=True):
        out, _ = attend(p, OLD)
        after = out.float() * 2  # work behind the attention, in the graph
    graph.replay()  # pauses at the attention's wait
    try:
        out.cpu()
    except RuntimeError as exc:
        assert "ExternalEvent" in str(exc), exc
    else:
        raise AssertionError("a read behind a waiting replay did not fail")
    try:
        NPU.synchronize()
    except RuntimeError as exc:
        assert "hangs" in str(exc), exc
    else:
        raise AssertionError("synchronize behind a waiting replay did not fail")
    graph.update(cpu_update_input=[{"actual_seq_lengths_kv": NEW}])
    assert torch.equal(out.cpu(), want) and torch.equal(after.cpu(), want.float() * 2)


@check
def auto_dispatch_update_changes_the_captured_lengths() -> None:
    p = paged(2)
    graph = NPU.NPUGraph()
    with NPU.graph(graph, auto_dispatch_capture=True):
        out, _ = attend(p, OLD)
    records = graph.graph_dispatch_mode.graph_dispatch_records
    assert len(records) == 1 and records[0].op._only == "out"
    for lengths in (NEW, OLD, [48, 1]):
        graph.update(cpu_update_input=[{"actual_seq_lengths_kv": lengths}])
        graph.replay()
        assert torch.equal(out.cpu(), attend(p, lengths)[0].cpu()), lengths
    try:
        NPU.NPUGraph().update([{}])
    except RuntimeError as exc:
        assert "auto_dispatch_capture=True" in str(exc)
    else:
        raise AssertionError("update of a graph captured without auto-dispatch did not fail")


@check
def mla_decode_lengths_are_captured_and_updated() -> None:
    g = torch.Generator().manual_seed(3)
    n, blocks = 32, 4
    q = torch.randn(2, 1, n, 512, generator=g).bfloat16().to("npu")
    q_rope = torch.randn(2, 1, n, 64, generator=g).bfloat16().to("npu")
    kv = torch.randn(blocks, BLOCK, 512, generator=g).bfloat16().to("npu")
    k_rope = torch.randn(blocks, BLOCK, 64, generator=g).bfloat16().to("npu")
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32).to("npu")

    def mla(lengths: list[int]) -> Any:
        return TNPU.npu_fused_infer_attention_score(
            q,
            kv,
            kv,
            query_rope=q_rope,
            key_rope=k_rope,
            num_heads=n,
            num_key_value_heads=1,
            input_layout="BSND",
            block_table=table,
            block_size=BLOCK,
            scale=0.1,
            actual_seq_lengths_kv=lengths,
        )

    graph = NPU.NPUGraph()
    with NPU.graph(graph, auto_dispatch_capture=True):
        out, _ = mla([3, 30])
    graph.update([{"actual_seq_lengths_kv": [3, 30]}])
    graph.replay()
    stale = out.cpu()
    assert torch.equal(stale, mla([3, 30])[0].cpu())
    graph.update([{"actual_seq_lengths_kv": [17, 2]}])
    graph.replay()
    assert torch.equal(out.cpu(), mla([17, 2])[0].cpu()) and not torch.equal(out.cpu(), stale)


@check
def counters_per_step() -> None:
    x, w, idx, cache = inputs()
    reset_counters()
    small_model(x, w, idx, cache)
    eager = counters()
    assert eager["fallback_ops"] >= 6 and eager["graph_replays"] == 0
    graph = NPU.NPUGraph()
    reset_counters()
    with NPU.graph(graph):
        small_model(x, w, idx, cache)
    captured = counters()
    assert captured["graph_captures"] == 1 and captured["fallback_ops"] == eager["fallback_ops"]
    nodes = graph.info()["nodes"]
    for _ in range(2):  # two steps
        reset_counters()
        graph.replay()
        step = counters()
        assert (step["graph_replays"], step["graph_replayed_ops"]) == (1, nodes), step
        assert step["fallback_ops"] == 0 and step["d2h_copies"] == step["scalar_reads"] == 0


@check
def launch_sources_name_each_launch_and_copy_but_not_a_replay() -> None:
    host = torch.arange(4, dtype=torch.float32)
    with launch_sources() as seen:
        x = host.to("npu")
        y = x.add(1)
        y.copy_(x)
        assert y.cpu().tolist() == host.tolist()
    named = {what: n for (what, _), n in seen.items()}
    assert named == {"copy:h2d": 1, "aten::add.out": 1, "copy:d2d": 1, "copy:d2h": 1}, named
    # Called from no frame of vLLM or the plugin: said so rather than guessed.
    assert {where for _, where in seen} == {"? <- ?"}, seen
    graph = NPU.NPUGraph()
    with NPU.graph(graph):
        y.add_(1)
    with launch_sources() as seen:
        graph.replay()
    assert not seen, seen


@check
def an_eager_wait_on_an_unrecorded_external_event_holds_its_stream() -> None:
    event = NPU.ExternalEvent()
    side = NPU.Stream()
    event.wait(side)
    with NPU.stream(side):
        try:
            torch.ones(2, device="npu").add_(1)
        except RuntimeError as exc:
            assert "ExternalEvent" in str(exc) and "aten::fill_" in str(exc), exc
        else:
            raise AssertionError("work behind an unrecorded ExternalEvent did not fail")
        event.record()
        assert torch.ones(2, device="npu").add_(1).cpu().tolist() == [2.0, 2.0]


@check
def vllms_torch_cuda_graph_names_capture_through_the_npu_runtime() -> None:
    # vLLM's CUDAGraphWrapper under NpuRuntime.runner_scope: torch.cuda.CUDAGraph,
    # torch.cuda.graph(..., pool=, stream=) and the graph pool reach torch_npu.npu's.
    from adapters.npu.runtime import NpuRuntime

    x, w, idx, cache = inputs()
    with NpuRuntime(TNPU).runner_scope():
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=stream):
            assert torch.cuda.is_current_stream_capturing()
            output = small_model(x, w, idx, cache)
            weak = TNPU._C._weak_ref_tensor(output)  # what vLLM keeps of a graph's output
        del output  # its block goes back to the pool; the graph still writes there
        x.mul_(-1)
        graph.replay()
        assert graph.pool() == pool
    assert torch.allclose(weak.cpu(), small_model(x, w, idx, cache).cpu())


@check
def a_compiled_function_traces_the_emulated_ops_and_is_captured() -> None:
    # torch_npu's ops are dispatcher ops: Dynamo keeps them whole (fullgraph), as vLLM's
    # piecewise compile needs; the compiled code is then captured like eager code.
    x = torch.randn(4, 32).to("npu")
    gamma = torch.ones(32).to("npu")
    positions = torch.tensor([0, 3, 1, 7], device="npu")
    cos_sin = torch.randn(8, 16).to("npu")

    def layer(x: torch.Tensor) -> torch.Tensor:
        y, _ = TNPU.npu_rms_norm(x * 2, gamma, epsilon=1e-6)
        # npu_mrope checks its positions on the device: its fake kernel must not.
        q, k = TNPU.npu_mrope(positions, y, y[:, :16].contiguous(), cos_sin, 16)
        return TNPU.npu_swiglu(torch.cat([q, q], -1)) + k.sum()

    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x).cpu(), layer(x).cpu())
    assert [c[0] for c in TNPU.calls[-3:]] == ["npu_rms_norm", "npu_mrope", "npu_swiglu"]
    graph = NPU.NPUGraph()
    with NPU.graph(graph):
        out = compiled(x)
    x.mul_(-3)
    graph.replay()
    assert torch.equal(out.cpu(), layer(x).cpu())

    # dtype arguments (typed `int` by torch_npu) and tensors made on npu inside the graph.
    def quantized(x: torch.Tensor) -> torch.Tensor:
        q, scale = TNPU.npu_dynamic_quant(x.bfloat16())
        w = torch.ones(32, 8, dtype=torch.int8, device="npu")
        return TNPU.npu_quant_matmul(
            q, w, torch.ones(8, device="npu"), pertoken_scale=scale, output_dtype=torch.bfloat16
        )

    compiled = torch.compile(quantized, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x).cpu(), quantized(x).cpu())


@check
def a_profiled_replay_records_the_captured_kernels() -> None:
    import csv
    import tempfile

    from adapters.npu.ops import NpuOps
    from adapters.npu.profiler import NpuProfiler
    from ports.profiler import ProfiledActivity, ProfileRequest

    ops = NpuOps(TNPU)
    x = torch.randn(4, 64, device="npu", dtype=torch.bfloat16)
    weight = torch.ones(64, device="npu", dtype=torch.bfloat16)
    graph = NPU.NPUGraph()
    with NPU.graph(graph):
        ops.rms_norm(x, weight, 1e-6)
    profiler = NpuProfiler(TNPU)
    activities = {ProfiledActivity.HOST, ProfiledActivity.DEVICE}
    with tempfile.TemporaryDirectory() as trace_dir:
        profiler.start(ProfileRequest(trace_dir, "replay", activities))
        graph.replay()
        graph.replay()
        session = profiler.stop()
        assert session is not None
        with open(Path(session, "ASCEND_PROFILER_OUTPUT", "kernel_details.csv")) as f:
            kernels = [row["Name"] for row in csv.DictReader(f)]
        trace = json.loads(Path(session, "ASCEND_PROFILER_OUTPUT", "trace_view.json").read_text())
    assert kernels == ["RmsNorm", "RmsNorm"], kernels
    # A replay launches nothing from the host: no torch_npu op range on the host side.
    assert "npu::npu_rms_norm" not in {e.get("name") for e in trace}


def main() -> None:
    names = sys.argv[1:] or list(CHECKS)
    results: dict[str, str] = {}
    for name in names:
        try:
            CHECKS[name]()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc(limit=6)
    print("CHECKS " + json.dumps(results))


if __name__ == "__main__":
    main()
