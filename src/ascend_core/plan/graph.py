"""Step: decide eager vs graph execution, the graph mode and the sizes to capture."""

from __future__ import annotations

from ascend_core.deployment import CompileMode, Deployment, GraphMode
from ascend_core.plan import fields
from ascend_core.plan.result import Draft
from ports.device import DeviceKind


def decide_graph_mode(deployment: Deployment, draft: Draft) -> Draft:
    """Eager on the host, with enforce_eager, or with launch blocking; otherwise NPU graphs."""
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
        return _eager(
            draft,
            graph_mode,
            comp.mode,
            "the host device runs the reference ops eagerly; graph capture is an NPU feature",
            unset_compiles=True,
        )
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
