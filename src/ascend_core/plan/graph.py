"""Step: decide eager vs graph execution, the graph mode and the sizes to capture."""

from __future__ import annotations

from ascend_core.deployment import CompileMode, Deployment, GraphMode
from ascend_core.plan import fields
from ascend_core.plan.result import Draft
from ports.device import DeviceKind

# Why the host compiles: its per-step cost at small batches is Python dispatch of a few
# thousand small torch ops (scripts/bench_profile.py --mode calls); one Dynamo trace with
# Inductor, as vLLM's own CPU platform does, runs the same ops (ours, since custom ops
# stay on) as generated code. Attention stays one opaque op, run eagerly.
HOST_COMPILE_REASON = (
    "the host device compiles the model once with Dynamo and Inductor (vLLM's own CPU "
    "platform does the same; piecewise compilation exists for graph capture, which the "
    "host does not do); the custom ops stay ours, attention runs eagerly as one opaque "
    "op; set enforce_eager (or compilation mode NONE) to run every op eagerly"
)
HOST_GRAPHS_REASON = "graph capture is an NPU feature; the host device captures no graphs"


def decide_graph_mode(deployment: Deployment, draft: Draft) -> Draft:
    """On the host: no graphs, one Dynamo trace compiled by Inductor unless eager is asked
    for. On an NPU: eager with enforce_eager; with launch blocking, compiled without graphs;
    otherwise NPU graphs."""
    draft = _decide(deployment, draft)
    config = draft.decisions.ascend_config
    if (
        config is not None
        and config.ascend_compilation_config.enable_npugraph_ex
        and draft.decisions.graph_mode is GraphMode.NONE
    ):
        draft = draft.warn(
            "additional_config.ascend_compilation_config.enable_npugraph_ex has no effect: "
            "no NPU graphs are captured (graph mode NONE)."
        )
    return draft


def _decide(deployment: Deployment, draft: Draft) -> Draft:
    comp = deployment.compilation
    draft = draft.decide(compile_mode=comp.mode, capture_sizes=comp.capture_sizes)
    graph_mode = comp.graph_mode
    if deployment.device_kind is DeviceKind.CPU:
        return _host(draft, graph_mode, comp.mode, comp.enforce_eager)
    if comp.enforce_eager:
        return _eager(draft, graph_mode, comp.mode, "enforce_eager is set", unset_compiles=True)
    if deployment.launch_blocking:
        # Chosen over an error: ASCEND_LAUNCH_BLOCKING=1 is set on purpose to debug a
        # kernel, and that session should start; graph capture needs asynchronous launch,
        # so graphs go (the compiled model stays) and the change says so.
        return _eager(
            draft,
            graph_mode,
            comp.mode,
            "ASCEND_LAUNCH_BLOCKING=1 launches kernels synchronously, which graph capture "
            "cannot record; unset it to capture NPU graphs",
            keep_compile=True,
        )
    if graph_mode is None:
        graph_mode = GraphMode.PIECEWISE
        if comp.mode not in (None, CompileMode.VLLM_COMPILE):
            graph_mode = GraphMode.NONE
        draft = draft.change(
            fields.GRAPH_MODE,
            None,
            graph_mode,
            "unset; PIECEWISE captures NPU graphs between attention layers and needs no "
            "full-graph support from the attention backend"
            if graph_mode is GraphMode.PIECEWISE
            else f"unset; piecewise graphs need compilation mode VLLM_COMPILE, not "
            f"{comp.mode.name if comp.mode else 'unset'}",
        )
    elif graph_mode.needs_piecewise_compile and comp.mode not in (None, CompileMode.VLLM_COMPILE):
        assert comp.mode is not None
        draft = draft.change(
            fields.GRAPH_MODE,
            graph_mode,
            GraphMode.NONE,
            f"{graph_mode.name} graphs are cut by vLLM's piecewise compiler, and compilation "
            f"mode is {comp.mode.name}; set mode VLLM_COMPILE to keep them",
        )
        graph_mode = GraphMode.NONE
    draft = draft.decide(graph_mode=graph_mode)
    if graph_mode is not GraphMode.NONE:
        draft = _fit_capture_sizes(deployment, draft)
    return draft


def _host(
    draft: Draft, graph_mode: GraphMode | None, mode: CompileMode | None, enforce_eager: bool
) -> Draft:
    """Graph mode NONE; compile mode DYNAMO_TRACE_ONCE when unset or VLLM_COMPILE.

    An operator's NONE, STOCK_TORCH_COMPILE or DYNAMO_TRACE_ONCE stands; enforce_eager
    turns compilation off as it does on an NPU.
    """
    if enforce_eager:
        return _eager(draft, graph_mode, mode, "enforce_eager is set", unset_compiles=True)
    if graph_mode is not GraphMode.NONE:
        draft = draft.change(fields.GRAPH_MODE, graph_mode, GraphMode.NONE, HOST_GRAPHS_REASON)
    if mode in (None, CompileMode.VLLM_COMPILE):
        draft = draft.change(
            fields.COMPILE_MODE, mode, CompileMode.DYNAMO_TRACE_ONCE, HOST_COMPILE_REASON
        )
        draft = draft.decide(compile_mode=CompileMode.DYNAMO_TRACE_ONCE)
    return draft.decide(graph_mode=GraphMode.NONE)


def _eager(
    draft: Draft,
    graph_mode: GraphMode | None,
    mode: CompileMode | None,
    reason: str,
    unset_compiles: bool = False,
    keep_compile: bool = False,
) -> Draft:
    """Graph mode NONE, and compile mode NONE too unless `keep_compile`.

    mode None is the operator leaving it unset: vLLM then compiles (VLLM_COMPILE at its
    default optimization level), so with `unset_compiles` that is changed to NONE too.
    """
    if graph_mode is not GraphMode.NONE:
        draft = draft.change(fields.GRAPH_MODE, graph_mode, GraphMode.NONE, reason)
    if keep_compile:
        return draft.decide(graph_mode=GraphMode.NONE)
    if (mode is not None or unset_compiles) and mode is not CompileMode.NONE:
        draft = draft.change(fields.COMPILE_MODE, mode, CompileMode.NONE, reason)
        draft = draft.decide(compile_mode=CompileMode.NONE)
    return draft.decide(graph_mode=GraphMode.NONE)


def _fit_capture_sizes(deployment: Deployment, draft: Draft) -> Draft:
    """With sequence parallelism, every captured batch must split evenly over the TP ranks."""
    tp = deployment.parallel.tp
    sizes = draft.decisions.capture_sizes
    if not draft.decisions.sequence_parallel or tp == 1 or sizes is None:
        return draft
    kept = tuple(s for s in sizes if s % tp == 0)
    if kept == sizes:
        return draft
    if kept:
        reason = (
            f"sequence parallelism splits each captured batch over tensor_parallel_size={tp} "
            f"ranks; dropped {[s for s in sizes if s % tp]}"
        )
    else:
        # None divisible: round up rather than lose graphs altogether.
        kept = tuple(sorted({-(-s // tp) * tp for s in sizes}))
        reason = (
            f"sequence parallelism splits each captured batch over tensor_parallel_size={tp} "
            "ranks and no size was divisible; rounded each up to a multiple"
        )
    return draft.change(fields.CAPTURE_SIZES, sizes, kept, reason).decide(capture_sizes=kept)
