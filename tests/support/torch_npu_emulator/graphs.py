"""torch_npu.npu's graph API (2.14.0's torch_npu/npu/graphs.py) on the emulated `npu` device.

Test support, not product. The device (support.emulated_npu_device) records what is launched
on a capturing stream and refuses what a real capture refuses; this module holds the
Python half: NPUGraph, the `graph` context, pools, task groups and their update, the
ExternalEvent, and the auto-dispatch capture of the fused attention ops with
NPUGraph.update(cpu_update_input=...).

A torch_npu op launched during a capture is one recorded node, as one kernel launch is on
the device: its host-side arguments (the `actual_seq_lengths` lists) are copied at capture
and a replay runs it with those values, unless the task group holding it was updated
(graph_task_update_begin/end). A replay that reaches a captured ExternalEvent wait not yet
recorded pauses there and goes on when the event is recorded, as the device would.

Where the emulation differs from a device, knowingly:
- the capture runs the work once as it records it (a device only records): captured
  outputs and memory written during the capture hold values, not garbage;
- a replay's temporaries (the CPU kernels' results before they are copied into the
  captured outputs, an emulated torch_npu kernel's scratch) are host memory outside the
  device's books: the device's allocated, peak and allocation counts do not move;
- work issued on a stream behind a replay that waits for an ExternalEvent is refused
  (the emulator runs work when issued) where a device would queue it;
- a torch_npu op's node keeps its tensors alive (aten ops address pool memory without
  owning it, so the pool reuses freed blocks as the caching allocator's private pool does,
  first fit up to twice the size).
"""

from __future__ import annotations

import copy
import json
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = [
    "ExternalEvent",
    "NPUGraph",
    "graph",
    "graph_pool_handle",
    "graph_task_group_begin",
    "graph_task_group_end",
    "graph_task_update_begin",
    "graph_task_update_end",
    "is_current_stream_capturing",
]

StreamKey = tuple[int, int]

# The module-wide state of one process (the device is one per process too).
_NPU: Any = None  # the emulated torch_npu.npu, set by bind()
_TORCH_NPU: Any = None  # the emulated torch_npu module, for the auto-dispatch capture
_GRAPHS: weakref.WeakValueDictionary[int, NPUGraph] = weakref.WeakValueDictionary()
_OPEN_GROUPS: dict[StreamKey, tuple[NPUGraph, int]] = {}  # stream -> (graph, first node)
_UPDATING: dict[StreamKey, list[Any]] = {}  # stream -> [handle, ops seen]
_PAUSED: list[tuple[NPUGraph, int, StreamKey, ExternalEvent]] = []
_DISPATCH_MODES: list[_GraphDispatchMode] = []
# torch_npu ops run by graph replays, by name (for tests: what a replay ran, where the
# device's op counts hold launches from the host only).
REPLAYED: Counter[str] = Counter()


def bind(npu: Any, torch_npu: Any) -> None:
    """The emulated torch_npu.npu (whose device this module drives) and torch_npu."""
    global _NPU, _TORCH_NPU
    _NPU, _TORCH_NPU = npu, torch_npu


def _ext() -> Any:
    return _NPU.device()


def _key(stream: Any) -> StreamKey:
    return int(stream.device_index), int(stream.stream_id)


def _current() -> Any:
    return torch.accelerator.current_stream()


def _stream(stream: Any) -> Any:
    return _current() if stream is None else stream


def _capture_on(stream: Any) -> int:
    if _NPU is None or _NPU._ext is None:
        return 0
    return int(_NPU._ext.capture_of(*_key(stream)))


# -- nodes ----------------------------------------------------------------------------


def snapshot(value: Any) -> Any:
    """Host-side arguments as a launch takes them: lists and host tensors by value,
    device tensors by reference (their memory is what the graph addresses)."""
    if isinstance(value, torch.Tensor):
        return value if value.device.type == "npu" else value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(snapshot(v) for v in value)
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    return copy.copy(value)


class OpNode:
    """One torch_npu op launched during a capture: run again at each replay with the
    arguments it was captured (or last updated) with, into the captured outputs."""

    def __init__(
        self,
        name: str,
        overload: str,
        run: Callable[[str, dict[str, Any]], Any],
        bound: dict[str, Any],
        result: Any,
        where: torch.device | None,
    ) -> None:
        self.name, self.overload, self._run = name, overload, run
        self.bound = snapshot(bound)
        self.outputs = _tensors(result)
        self.where = where

    def replay(self) -> bool:
        REPLAYED[self.name] += 1
        with torch.device(self.where) if self.where is not None else _null():
            result = self._run(self.overload, self.bound)
        for dst, src in zip(self.outputs, _tensors(result), strict=False):
            if dst is not src and dst.data_ptr() != src.data_ptr():
                dst.copy_(src)
        return True

    def update(self, overload: str, bound: dict[str, Any]) -> Any:
        self.overload, self.bound = overload, snapshot(bound)
        return self.outputs[0] if len(self.outputs) == 1 else tuple(self.outputs)


class _EventNode:
    def __init__(self, event: ExternalEvent, action: str) -> None:
        self.event, self.action, self.name = event, action, f"ExternalEvent.{action}"

    def replay(self) -> bool:
        if self.action == "wait":
            return self.event._recorded
        if self.action == "reset":
            self.event._recorded = False
        else:
            self.event._set_recorded()
        return True


def _tensors(result: Any) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (list, tuple)):
        return [t for t in result if isinstance(t, torch.Tensor)]
    return []


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def record_op(
    name: str,
    overload: str,
    run: Callable[[str, dict[str, Any]], Any],
    bound: dict[str, Any],
    result: Any,
    where: torch.device | None,
) -> None:
    """Called by the emulated torch_npu after an op ran on a capturing stream."""
    stream = _current()
    graph = _GRAPHS[_capture_on(stream)]
    graph._add(OpNode(name, overload, run, bound, result, where), stream)


class TaskNode:
    """A collective launched during a capture (the emulated stand-in for an HCCL op, which
    a real capture records on the stream): run again at each replay, its result written
    into the captured output unless it is that output."""

    def __init__(self, name: str, run: Callable[[], Any], result: Any) -> None:
        self.name, self._run = name, run
        self.outputs = _tensors(result)

    def replay(self) -> bool:
        for dst, src in zip(self.outputs, _tensors(self._run()), strict=False):
            if dst is not src and dst.data_ptr() != src.data_ptr():
                dst.copy_(src)
        return True


def record_task(name: str, run: Callable[[], Any], result: Any) -> None:
    """`run` ran on the capturing stream (as one device launch): a replay runs it again."""
    stream = _current()
    graph_id = _capture_on(stream)
    if graph_id == 0:
        raise RuntimeError(f"record_task: {name} was launched on a stream that is not capturing")
    _GRAPHS[graph_id]._add(TaskNode(name, run, result), stream)


def updating(stream: Any) -> bool:
    return bool(_UPDATING) and _key(stream) in _UPDATING


def apply_update(name: str, overload: str, bound: dict[str, Any]) -> Any:
    """An op launched between graph_task_update_begin/end: it replaces the arguments of
    the matching op of the task group (the device launches nothing now)."""
    state = _UPDATING[_key(_current())]
    handle, seen = state
    ops = handle.ops
    if seen >= len(ops):
        raise RuntimeError(
            f"graph_task_update: torch_npu.{name} is op {seen + 1} of the update, but the task "
            f"group holds {len(ops)}; launch the same ops as the captured group, in order"
        )
    node = ops[seen]
    if node.name != name:
        raise RuntimeError(
            f"graph_task_update: torch_npu.{name} launched where the task group captured "
            f"torch_npu.{node.name}; an update relaunches the captured op with new arguments"
        )
    state[1] = seen + 1
    return node.update(overload, bound)


def check_launch(name: str) -> None:
    _ext().check_not_blocked(f"torch_npu.{name}")


# -- the API ----------------------------------------------------------------------------


def is_current_stream_capturing() -> bool:
    return _capture_on(_current()) != 0


def graph_pool_handle() -> tuple[int, int]:
    """An opaque token naming a graph memory pool (graphs captured with it share it)."""
    return (0, int(_ext().pool_new()))


class TaskGroupHandle:
    """What graph_task_group_end returns: the torch_npu ops launched in the group."""

    def __init__(self, graph: NPUGraph, ops: list[OpNode]) -> None:
        self.graph, self.ops = graph, ops

    def __repr__(self) -> str:
        return f"<task group of {len(self.ops)} op(s): {[op.name for op in self.ops]}>"


def graph_task_group_begin(stream: Any) -> None:
    key = _key(stream)
    graph_id = _capture_on(stream)
    if graph_id == 0:
        raise RuntimeError(
            f"graph_task_group_begin: stream {key[1]} on npu:{key[0]} is not capturing; a "
            "task group is marked inside a capture"
        )
    if key in _OPEN_GROUPS:
        raise RuntimeError("graph_task_group_begin: a task group is already open on this stream")
    graph = _GRAPHS[graph_id]
    _OPEN_GROUPS[key] = (graph, len(graph._py_nodes))


def graph_task_group_end(stream: Any) -> TaskGroupHandle:
    key = _key(stream)
    if key not in _OPEN_GROUPS:
        raise RuntimeError("graph_task_group_end without graph_task_group_begin on this stream")
    graph, first = _OPEN_GROUPS.pop(key)
    ops = [n for n in graph._py_nodes[first:] if isinstance(n, OpNode)]
    if not ops:
        raise RuntimeError("graph_task_group_end: no torch_npu op was launched in the group")
    return TaskGroupHandle(graph, ops)


def graph_task_update_begin(stream: Any, handle: TaskGroupHandle) -> None:
    if not isinstance(handle, TaskGroupHandle):
        raise TypeError(
            f"graph_task_update_begin: handle must come from graph_task_group_end, "
            f"not {type(handle).__name__}"
        )
    key = _key(stream)
    if key in _UPDATING:
        raise RuntimeError("graph_task_update_begin: an update is already open on this stream")
    if _capture_on(stream):
        raise RuntimeError("graph_task_update_begin on a capturing stream; use a side stream")
    _UPDATING[key] = [handle, 0]


def graph_task_update_end(stream: Any) -> None:
    key = _key(stream)
    if key not in _UPDATING:
        raise RuntimeError("graph_task_update_end without graph_task_update_begin on this stream")
    handle, seen = _UPDATING.pop(key)
    if seen != len(handle.ops):
        raise RuntimeError(
            f"graph_task_update_end: {seen} op(s) relaunched, the task group holds "
            f"{len(handle.ops)}"
        )


class ExternalEvent:
    """torch_npu.npu.ExternalEvent: may be waited on before it is recorded; reset() clears
    it. Captured, its wait/reset/record are nodes of the graph: a replay waits at the wait
    until the event is recorded (pausing here, resumed by record())."""

    def __init__(self) -> None:
        _ext()
        self._recorded = False
        self.npu_event = id(self)

    def record(self, stream: Any = None) -> None:
        stream = _stream(stream)
        graph_id = _capture_on(stream)
        if graph_id:
            _GRAPHS[graph_id]._add(_EventNode(self, "record"), stream)
        else:
            self._set_recorded()

    def wait(self, stream: Any = None) -> None:
        stream = _stream(stream)
        graph_id = _capture_on(stream)
        if graph_id:
            _GRAPHS[graph_id]._add(_EventNode(self, "wait"), stream)
        elif not self._recorded:
            _ext().set_blocked(*_key(stream), f"ExternalEvent {self.npu_event:#x} (waited eagerly)")
            _PAUSED.append((None, 0, _key(stream), self))  # type: ignore[arg-type]

    def reset(self, stream: Any = None) -> None:
        stream = _stream(stream)
        graph_id = _capture_on(stream)
        if graph_id:
            _GRAPHS[graph_id]._add(_EventNode(self, "reset"), stream)
        else:
            self._recorded = False

    def _set_recorded(self) -> None:
        self._recorded = True
        waiting = [p for p in _PAUSED if p[3] is self]
        for entry in waiting:
            _PAUSED.remove(entry)
            graph, position, key, _ = entry
            _ext().clear_blocked(*key)
            if graph is not None:
                graph._run(position)

    def __repr__(self) -> str:
        return f"<torch_npu.npu.ExternalEvent {self.npu_event:#x}>"


class NPUGraph:
    """torch_npu.npu.NPUGraph on the emulated device."""

    def __init__(self) -> None:
        ext = _ext()  # installs the device: torch.npu from here on
        self.graph_dispatch_mode = _GraphDispatchMode()
        self.auto_dispatch_capture = False
        self._id = int(ext.graph_new())
        self._py_nodes: list[Any] = []
        _GRAPHS[self._id] = self
        weakref.finalize(self, ext.graph_delete, self._id)

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global") -> None:
        pool_id = 0 if pool is None else int(pool[1])
        self._py_nodes = []
        _ext().capture_begin(self._id, pool_id, capture_error_mode)

    def capture_end(self) -> None:
        left_open = [key for key, (graph, _) in _OPEN_GROUPS.items() if graph is self]
        for key in left_open:
            del _OPEN_GROUPS[key]
        try:
            _ext().capture_end(self._id)
        except RuntimeError:
            self._py_nodes = []
            raise
        if left_open:
            self.reset()
            raise RuntimeError(
                "NPUGraph.capture_end: graph_task_group_begin without graph_task_group_end "
                f"on stream(s) {[key[1] for key in left_open]}; the capture is dropped"
            )

    def replay(self) -> None:
        if any(p[0] is self for p in _PAUSED):
            raise RuntimeError(
                "NPUGraph.replay: the previous replay of this graph still waits for an "
                "ExternalEvent that has not been recorded"
            )
        self._run(0, key=_key(_current()))

    def _run(self, start: int, key: StreamKey | None = None) -> None:
        if key is None:
            key = self._key
        self._key = key
        stop = int(_ext().graph_replay(self._id, start, self._replay_node))
        if stop < self._size():
            event = self._py_nodes[self._node_at(stop)].event
            _ext().set_blocked(*key, f"ExternalEvent {event.npu_event:#x} (a graph replay)")
            _PAUSED.append((self, stop, key, event))

    def _replay_node(self, index: int) -> bool:
        return bool(self._py_nodes[index].replay())

    def _size(self) -> int:
        return int(_ext().graph_info(self._id)["nodes"])

    def _node_at(self, position: int) -> int:
        name = _ext().graph_nodes(self._id)[position]
        return int(name.removeprefix("python:"))

    def reset(self) -> None:
        for entry in [p for p in _PAUSED if p[0] is self]:
            _PAUSED.remove(entry)
            _ext().clear_blocked(*entry[2])  # the replay's remaining work is dropped
        _ext().graph_reset(self._id)
        self._py_nodes = []

    def pool(self) -> tuple[int, int]:
        return (0, int(_ext().graph_info(self._id)["pool"]))

    def update(self, cpu_update_input: Sequence[dict[str, Any]]) -> None:
        if not self.auto_dispatch_capture:
            raise RuntimeError(
                "The current graph configuration does not support update, capture with "
                "auto_dispatch_capture=True (torch.npu.graph(..., auto_dispatch_capture=True))"
            )
        self.graph_dispatch_mode.update_capture_record(cpu_update_input)

    def debug_dump(self, debug_path: str) -> None:
        """The record as JSON: one entry per node (the emulator's own format)."""
        names = [
            self._py_nodes[int(n.removeprefix("python:"))].name if n.startswith("python:") else n
            for n in _ext().graph_nodes(self._id)
        ]
        with open(debug_path, "w") as f:
            json.dump({"nodes": names, **_ext().graph_info(self._id)}, f, indent=1)

    def super_kernel_optimize(self, optimize_options: Any = None, debug_options: Any = None) -> Any:
        raise NotImplementedError("NPUGraph.super_kernel_optimize is not emulated")

    # -- for tests and benchmarks (not torch_npu API) --
    def info(self) -> dict[str, int]:
        """nodes, pool, pool_bytes, pool_free_bytes, captured, capturing, device, stream."""
        return dict(_ext().graph_info(self._id))

    def _add(self, node: Any, stream: Any) -> None:
        index = len(self._py_nodes)
        self._py_nodes.append(node)
        _ext().record_python_node(self._id, index, int(stream.stream_id), node.name)


class graph:
    """torch.npu.graph: captures the work of its body into `npu_graph`."""

    default_capture_stream: Any = None

    def __init__(
        self,
        npu_graph: NPUGraph,
        pool: Any = None,
        stream: Any = None,
        auto_dispatch_capture: bool = False,
        capture_error_mode: str = "global",
    ) -> None:
        _ext()
        if self.__class__.default_capture_stream is None:
            self.__class__.default_capture_stream = torch.npu.Stream()  # type: ignore[attr-defined]
        self.pool = () if pool is None else (pool,)
        self.capture_stream = stream if stream is not None else self.default_capture_stream
        self.stream_ctx = torch.npu.stream(self.capture_stream)  # type: ignore[attr-defined]
        self.npu_graph = npu_graph
        self.capture_error_mode = capture_error_mode
        self.npu_graph.auto_dispatch_capture = auto_dispatch_capture

    def __enter__(self) -> None:
        torch.npu.synchronize()  # type: ignore[attr-defined]
        torch.npu.empty_cache()  # type: ignore[attr-defined]
        self.stream_ctx.__enter__()
        if self.npu_graph.auto_dispatch_capture:
            self.npu_graph.graph_dispatch_mode.__enter__()
        self.npu_graph.capture_begin(*self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        try:
            self.npu_graph.capture_end()
        finally:
            if self.npu_graph.auto_dispatch_capture:
                self.npu_graph.graph_dispatch_mode.__exit__(exc_type, exc_value, traceback)
            self.stream_ctx.__exit__(exc_type, exc_value, traceback)


# -- auto-dispatch capture ----------------------------------------------------------------

# The wheel's handlers for the ops the emulator computes: the host-side lists an update
# may change (torch_npu/npu/_npugraph_handlers/ifa_handler.py).
UPDATABLE: dict[str, tuple[str, ...]] = {
    "npu_fused_infer_attention_score": ("actual_seq_lengths", "actual_seq_lengths_kv"),
    "npu_fused_infer_attention_score_v2": ("actual_seq_qlen", "actual_seq_kvlen"),
}
_OUT_KWARGS = {
    "npu_fused_infer_attention_score": (
        "input_layout",
        "quant_scale2",
        "block_table",
        "num_heads",
        "num_key_value_heads",
        "softmax_lse_flag",
        "query_rope",
    ),
}


class _Record:
    def __init__(
        self,
        event: ExternalEvent,
        handle: TaskGroupHandle,
        op: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.event, self.handle, self.op = event, handle, op
        self.args, self.kwargs = list(args), kwargs


class _GraphDispatchMode:
    """The auto-dispatch capture: each fused attention op launched during the capture gets
    its own task group behind an ExternalEvent, so that update() can relaunch it with new
    host-side lengths on the update stream and release the replay's wait."""

    update_stream: Any = None

    def __init__(self) -> None:
        self.graph_dispatch_records: list[_Record] = []
        self._inside = False
        if _GraphDispatchMode.update_stream is None:
            _GraphDispatchMode.update_stream = torch.npu.Stream()  # type: ignore[attr-defined]

    def __enter__(self) -> _GraphDispatchMode:
        _DISPATCH_MODES.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self in _DISPATCH_MODES:
            _DISPATCH_MODES.remove(self)

    def handles(self, name: str) -> bool:
        return not self._inside and name in UPDATABLE

    def dispatch(self, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        stream = torch.npu.current_stream()  # type: ignore[attr-defined]
        event = ExternalEvent()
        event.wait(stream)
        event.reset(stream)
        kwargs = dict(kwargs)
        self._inside = True
        try:
            out_op = op.out if op._only != "out" else op
            if op._only != "out":
                name = op.__name__
                workspace = getattr(op._owner, f"_{name}_get_max_workspace")(*args, **kwargs)
                keys = _OUT_KWARGS.get(name, ())
                output, lse = getattr(op._owner, f"_{name}_infer_output")(
                    args[0], args[2], **{k: kwargs[k] for k in keys if k in kwargs}
                )
                kwargs["workspace"] = workspace
                kwargs["out"] = [output, lse]
            graph_task_group_begin(stream)
            out_op(*args, **kwargs)
            handle = graph_task_group_end(stream)
        finally:
            self._inside = False
        self.graph_dispatch_records.append(_Record(event, handle, out_op, args, kwargs))
        return kwargs["out"]

    def update_capture_record(self, cpu_update_input: Sequence[dict[str, Any]]) -> None:
        inputs = list(cpu_update_input)
        if len(inputs) == 1:
            inputs = [dict(inputs[0]) for _ in self.graph_dispatch_records]
        if len(inputs) != len(self.graph_dispatch_records):
            raise RuntimeError(
                f"Currently, there are {len(self.graph_dispatch_records)} operators that need "
                f"to be updated by capture, and there are only {len(inputs)} elements in the "
                "incoming cpu_update_input list"
            )
        stream = self.update_stream
        with torch.npu.stream(stream):  # type: ignore[attr-defined]
            for record, update in zip(self.graph_dispatch_records, inputs, strict=True):
                graph_task_update_begin(stream, record.handle)
                for key, value in update.items():
                    if key in record.kwargs or key in UPDATABLE.get(record.op.__name__, ()):
                        record.kwargs[key] = value
                self._inside = True
                try:
                    record.op(*record.args, **record.kwargs)
                finally:
                    self._inside = False
                graph_task_update_end(stream)
                record.event.record(stream)


def active_dispatch_mode(name: str) -> _GraphDispatchMode | None:
    if _DISPATCH_MODES and _DISPATCH_MODES[-1].handles(name):
        return _DISPATCH_MODES[-1]
    return None
