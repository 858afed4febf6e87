"""Step: decide eager vs graph execution, the graph mode and the sizes to capture."""

from __future__ import annotations

from ascend_core.deployment import CompileMode, Deployment, GraphMode
from ascend_core.plan import fields
from ascend_core.plan.npugraph_ex import unused_reason
from ascend_core.plan.result import Draft
from ports.device import ChipFamily, DeviceKind

_COMPILE = "ascend_compilation_config"
# vllm_ascend/platform.py MAX_CAPTURE_SIZES_FOR_950 (later MAX_REDUCED_CAPTURE_SIZES):
# graph sizes the A5 driver can capture in piecewise mode until its fix ships.
A5_MAX_CAPTURE_SIZES = 4
_FULL_GRAPHS = (GraphMode.FULL, GraphMode.FULL_DECODE_ONLY, GraphMode.FULL_AND_PIECEWISE)

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
    for. On an NPU: eager with enforce_eager or a whole-model Dynamo mode
    (STOCK_TORCH_COMPILE, DYNAMO_TRACE_ONCE); with launch blocking, compiled without
    graphs; otherwise NPU graphs."""
    draft = _decide(deployment, draft)
    draft = _no_cuda_fusion_passes(deployment, draft)
    config = draft.decisions.ascend_config
    if config is None:
        return draft
    # npugraph_ex is on by default (as in vllm-ascend); a written true earns a warning, the
    # default a note (plan/npugraph_ex.py). No mode uses it here: the backend is not bound.
    compilation = config.ascend_compilation_config
    for key in ("enable_npugraph_ex", "enable_static_kernel"):
        if not (config.given(f"{_COMPILE}.{key}") and getattr(compilation, key)):
            continue
        why = unused_reason(deployment)
        draft = draft.warn(f"additional_config.{_COMPILE}.{key} has no effect: {why}.")
    return draft


# vLLM's RMSNorm/SiluMul + quant fusion passes replace patterns with its CUDA kernels
# (RMSNormQuantFusionPass and its kin); on an NPU they fail when the compiler builds them.
FUSION_PASSES_REASON = (
    "vLLM's norm/activation + quant fusion passes rewrite the graph into its CUDA kernels, "
    "which the NPU has none of; the NPU's own fused ops come through the ops port"
)


def _no_cuda_fusion_passes(deployment: Deployment, draft: Draft) -> Draft:
    """On an NPU that runs vLLM's compiler, its CUDA-only fusion passes go, with the reason."""
    if deployment.device_kind is not DeviceKind.NPU:
        return draft
    if draft.decisions.compile_mode not in (None, CompileMode.VLLM_COMPILE):
        return draft
    for field in (fields.FUSE_NORM_QUANT, fields.FUSE_ACT_QUANT):
        draft = draft.change(field, None, False, FUSION_PASSES_REASON)
    return draft


def _decide(deployment: Deployment, draft: Draft) -> Draft:
    comp = deployment.compilation
    draft = draft.decide(compile_mode=comp.mode, capture_sizes=comp.capture_sizes)
    graph_mode = comp.graph_mode
    if deployment.model.compressed_attention and not comp.enforce_eager:
        draft = _eager(draft, graph_mode, comp.mode, COMPRESSED_MLA_EAGER_REASON,
                       unset_compiles=True)
        return _no_capture(draft) if deployment.device_kind is DeviceKind.CPU else draft
    if deployment.device_kind is DeviceKind.CPU:
        if deployment.model.use_sparse and not comp.enforce_eager:
            draft = _eager(draft, graph_mode, comp.mode, SPARSE_MLA_HOST_EAGER_REASON,
                           unset_compiles=True)
            return _no_capture(draft)
        return _no_capture(_host(draft, graph_mode, comp.mode, comp.enforce_eager))
    if comp.enforce_eager:
        return _eager(draft, graph_mode, comp.mode, "enforce_eager is set", unset_compiles=True)
    if comp.mode in WHOLE_MODEL_DYNAMO_MODES:
        return _eager(draft, graph_mode, comp.mode, npu_dynamo_reason(comp.mode))
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
    asked, reasons = graph_mode, []
    if graph_mode is None:
        if comp.mode not in (None, CompileMode.VLLM_COMPILE):
            graph_mode = GraphMode.NONE
            reasons.append(
                f"unset; piecewise graphs need compilation mode VLLM_COMPILE, not "
                f"{comp.mode.name if comp.mode else 'unset'}"
            )
        elif deployment.speculative.method is not None:
            graph_mode = GraphMode.FULL_DECODE_ONLY
            reasons.append(DEFAULT_SPECULATIVE_REASON)
        elif deployment.model.use_mla:
            graph_mode = GraphMode.FULL_DECODE_ONLY
            reasons.append(DEFAULT_MLA_REASON)
        else:
            graph_mode = GraphMode.FULL_AND_PIECEWISE
            reasons.append(DEFAULT_DENSE_REASON)
    elif graph_mode.needs_piecewise_compile and comp.mode not in (None, CompileMode.VLLM_COMPILE):
        assert comp.mode is not None
        reasons.append(
            f"{graph_mode.name} graphs are cut by vLLM's piecewise compiler, and compilation "
            f"mode is {comp.mode.name}; set mode VLLM_COMPILE to keep them"
        )
        graph_mode = GraphMode.NONE
    graph_mode, served, dp_graphs = _npu_serves(deployment, graph_mode)
    reasons += served
    if graph_mode is not asked:
        # One change for the field, its reasons in the order they applied.
        draft = draft.change(fields.GRAPH_MODE, asked, graph_mode, "; ".join(reasons))
    draft = draft.decide(graph_mode=graph_mode, dp_graphs=dp_graphs)
    sizes = draft.decisions.capture_sizes
    if graph_mode is GraphMode.NONE or sizes is None:
        return draft
    # Each adjustment refines the last; one change carries them all (a field changes once).
    kept, reasons = _fit_capture_sizes(
        deployment.parallel.tp, draft.decisions.sequence_parallel, sizes
    )
    if graph_mode.needs_piecewise_compile and deployment.chip_family is ChipFamily.A5:
        kept, reason = _reduce_capture_sizes_for_a5(kept)
        reasons += [reason] if reason else []
    if kept == sizes:
        return draft
    return draft.change(fields.CAPTURE_SIZES, sizes, kept, "; ".join(reasons)).decide(
        capture_sizes=kept
    )


# The full-graph modes the NPU's attention backends capture: the paged and MLA backends'
# uniform decode steps whole (their metadata in persistent buffers, the fused attention
# op's host-side lengths updated before each replay; MoE layers inside, reading nothing
# back). FULL (mixed batches whole too) is not: a prefill's padded query and causal mask
# change shape with the batch. Hybrid models take the same defaults: vLLM's GDN metadata
# declares UNIFORM_BATCH, and a decode step's gated-delta-net (Qwen3-Next, Qwen3.5) or
# KDA (Kimi-Linear) layers update their conv and recurrent states inside the graph (state
# slots in vLLM's persistent metadata, nothing read back; tests/integration/npu:
# test_qwen3_next_on_emulated_npu.py in FULL_AND_PIECEWISE, test_kimi_linear_on_emulated_npu.py
# in FULL_DECODE_ONLY).
NPU_FULL_GRAPH_MODES: frozenset[GraphMode] = frozenset(
    {GraphMode.FULL_DECODE_ONLY, GraphMode.FULL_AND_PIECEWISE}
)
DEFAULT_DENSE_REASON = (
    "unset; FULL_AND_PIECEWISE (vllm-ascend's default since v0.23) captures each uniform "
    "decode step whole, attention inside, and every other step in pieces between the "
    "attention layers"
)
DEFAULT_MLA_REASON = (
    "unset; FULL_DECODE_ONLY is vllm-ascend's default for MLA models (each uniform decode "
    "step captured whole)"
)
NPU_FULL_MIXED_REASON = (
    "the NPU attention backends capture full graphs of uniform decode steps only (a "
    "prefill's padded query and causal mask change shape with the batch); mixed steps run "
    "in pieces between the attention layers"
)
# With speculative decoding each uniform decode step verifies 1 + k tokens a request; the
# paged and MLA builders declare UNIFORM_BATCH, so vLLM captures those steps whole (its
# capture sizes rounded to multiples of 1 + k). vLLM captures a drafter's forward only in
# piecewise graphs, so FULL_DECODE_ONLY runs it eagerly, as vllm-ascend runs MTP.
DEFAULT_SPECULATIVE_REASON = (
    "unset; with speculative decoding FULL_DECODE_ONLY (as vllm-ascend runs MTP) captures "
    "each uniform verify step of 1 + num_speculative_tokens tokens a request whole, "
    "attention inside; the drafter and mixed steps run compiled without graphs"
)
# The sparse MLA backend takes over vLLM's indexer module (adapters/vllm/attention/
# sparse_mla.py): its projections trace with the model, and what reads the step (the key
# write, the top-k) is one opaque op, so DSA compiles on the NPU. Its builder captures
# single-token decode steps whole (UNIFORM_SINGLE_TOKEN_DECODE: each token's block-table
# row is its sequence's, its length in a persistent buffer, the sparse ops take no
# host-side lengths); a mixed step's token rows are built anew each step, so the indexer
# op cannot sit in a piecewise graph.
# On the host the model compiles as one Inductor graph (DYNAMO_TRACE_ONCE), which nothing
# cuts at attention: the indexer's op and the attention op that reads its top-k share no
# tensor in the graph, and Inductor ran every layer's indexer after every attention op
# (measured on the tiny DeepSeek-V3.2: each attention read the previous step's top-k,
# all-zero ids). vLLM cuts its own graphs at its indexer op; the NPU's VLLM_COMPILE graph
# is cut at each attention op and its backend runs the pieces in program order.
SPARSE_MLA_HOST_EAGER_REASON = (
    "the sparse MLA (DSA) indexer's op and the attention op that reads its top-k share no "
    "tensor, and the host's one Inductor graph (DYNAMO_TRACE_ONCE) ran the indexer after "
    "the attention (wrong tokens); on the host DSA runs eagerly (the NPU's graph is cut "
    "at each attention op, which keeps the order)"
)
SPARSE_MLA_GRAPHS_REASON = (
    "the sparse MLA (DSA) backend captures single-token decode steps whole (the indexer's "
    "top-k and the sparse attention inside, their lengths in persistent buffers); a mixed "
    "step's per-token rows are rebuilt each step and its indexer op sits between the "
    "attention layers, so no piecewise graphs: FULL_DECODE_ONLY, other steps compiled "
    "without graphs"
)
SPARSE_MLA_SPECULATIVE_REASON = (
    "the sparse MLA (DSA) backend captures decode steps of one token a request only, and "
    "with speculative decoding each decode step verifies 1 + num_speculative_tokens; the "
    "model runs compiled without graphs"
)
# The plugin's DeepSeek-V4 class (adapters/vllm/models/deepseek_v4) attends request by
# request in Python over its paged input cache; it carries no @support_torch_compile.
COMPRESSED_MLA_EAGER_REASON = (
    "the plugin's DeepSeek-V4 class attends request by request over its paged input cache "
    "(Python loops reading the forward context) and is not built for compilation; its "
    "tensor shapes follow each request's context length (window, compressed rows, indexer "
    "keys), read to the host every step, which no captured NPU graph can replay; so the "
    "model runs eagerly (no compilation, no graphs)"
)
# MoE layers capture: routing, permutation, grouped matmuls and combine keep fixed shapes
# (T*k rows, padding past the routed count) and read nothing back (adapters/npu/moe.py).
NPU_MOE_PIECEWISE_REASON = (
    "the MoE layers are captured inside the pieces (fixed-size routing, nothing read back)"
)

# Tensor parallelism captures: vLLM's per-group capture context lets the NPU's device
# communicator in (the declared patch npu-graph-capture-communicator), the all-reduces
# are recorded in the graphs, and TP=2 on two emulated NPUs gives the TP=1 ids. Pipeline
# parallelism with graphs is not proven anywhere yet.
NPU_PARALLEL_GRAPHS_REASON = (
    "NPU graphs under pipeline parallelism are not proven yet (tensor parallelism is: "
    "its all-reduces are captured in the graphs), so the NPU workers capture no graphs; "
    "the model runs compiled without graphs"
)
# Data parallelism captures in one shape: DP attention with expert parallelism, TP 1 a
# DP rank (the DeepSeek decode shape). vLLM's runner all-reduces each step's token counts
# across the DP ranks (vllm/v1/worker/dp_utils.py), takes the least graph mode of any
# rank and pads every rank to the largest rank's captured size; an idle rank runs a dummy
# step; so every rank replays the same size and MC2's dispatch and combine in the graphs
# meet. Two emulated NPUs give the single-device ids (tests/e2e/
# test_serve_dp_ep_emulated_npu.py). Other DP shapes are not proven with graphs.
NPU_DP_EP_GRAPHS_REASON = (
    "data parallel {dp} with expert parallelism and TP 1 a DP rank keeps NPU graphs: "
    "vLLM all-reduces each step's token counts across the DP ranks, takes the least "
    "graph mode of any rank and pads every rank to the same captured size (an idle rank "
    "runs a dummy step), so each rank replays the same graph and the MoE layers' MC2 "
    "exchange inside it meets on every rank"
)
NPU_DP_GRAPHS_REASON = (
    "NPU graphs under data parallelism are proven only with expert parallelism at TP 1 "
    "a DP rank (a MoE model, --enable-expert-parallel, the DeepSeek decode shape); this "
    "deployment ({why}) is not, so the NPU workers capture no graphs; the model runs "
    "compiled without graphs"
)


def npu_dp_graphs(deployment: Deployment) -> tuple[bool, str]:
    """Whether the NPU keeps graphs under data parallelism (DP > 1, PP 1), and why."""
    par, model = deployment.parallel, deployment.model
    unproven = [
        what
        for what, off in (
            ("a dense model", not model.is_moe),
            ("no expert parallelism", model.is_moe and not par.expert_parallel),
            (f"TP {par.tp} a DP rank", par.tp > 1),
        )
        if off
    ]
    if unproven:
        return False, NPU_DP_GRAPHS_REASON.format(why=", ".join(unproven))
    return True, NPU_DP_EP_GRAPHS_REASON.format(dp=par.dp)


# vllm_ascend/platform.py check_and_update_config: a compilation mode other than NONE or
# VLLM_COMPILE gets cudagraph_mode NONE, and cudagraph_mode NONE then gets mode NONE.
WHOLE_MODEL_DYNAMO_MODES = (CompileMode.STOCK_TORCH_COMPILE, CompileMode.DYNAMO_TRACE_ONCE)


def npu_dynamo_reason(mode: CompileMode) -> str:
    """Why the NPU runs eagerly under one of vLLM's whole-model Dynamo modes."""
    return (
        f"compilation mode {mode.name} traces the whole model with Dynamo, which the NPU "
        "path does not run (as in vllm-ascend, which takes only NONE or VLLM_COMPILE on "
        "the NPU): NPU graphs are captured only from VLLM_COMPILE's pieces or whole "
        "decode steps, and the NPU's compile backend is eager (a trace that compiles "
        "nothing); the model runs eagerly. "
        "Set compilation mode VLLM_COMPILE (or leave it unset) for NPU graphs"
    )


def _npu_serves(
    deployment: Deployment, mode: GraphMode
) -> tuple[GraphMode, list[str], str]:
    """The graph mode the NPU's backends and layers can capture, why it differs, and
    under data parallelism whether graphs stay and why ("" otherwise)."""
    reasons: list[str] = []
    dp_graphs = ""
    piecewise_compiles = deployment.compilation.mode in (None, CompileMode.VLLM_COMPILE)
    if mode in _FULL_GRAPHS and mode not in NPU_FULL_GRAPH_MODES:
        # vLLM does the same for a backend below ALWAYS (ours: UNIFORM_BATCH).
        mode = GraphMode.FULL_AND_PIECEWISE if piecewise_compiles else GraphMode.FULL_DECODE_ONLY
        reasons.append(NPU_FULL_MIXED_REASON)
    par = deployment.parallel
    if mode is not GraphMode.NONE and par.pp > 1:
        mode = GraphMode.NONE
        reasons.append(NPU_PARALLEL_GRAPHS_REASON)
    elif mode is not GraphMode.NONE and par.dp > 1:
        kept, dp_graphs = npu_dp_graphs(deployment)
        if not kept:
            mode = GraphMode.NONE
            reasons.append(dp_graphs)
    if mode is not GraphMode.NONE and deployment.model.use_sparse:
        if deployment.speculative.method is not None:
            mode = GraphMode.NONE
            reasons.append(SPARSE_MLA_SPECULATIVE_REASON)
        elif mode is not GraphMode.FULL_DECODE_ONLY:
            mode = GraphMode.FULL_DECODE_ONLY
            reasons.append(SPARSE_MLA_GRAPHS_REASON)
    if mode is GraphMode.PIECEWISE and deployment.model.is_moe:
        reasons.append(NPU_MOE_PIECEWISE_REASON)
    return mode, reasons, dp_graphs


def _reduce_capture_sizes_for_a5(sizes: tuple[int, ...]) -> tuple[tuple[int, ...], str]:
    """Keep A5_MAX_CAPTURE_SIZES sizes spread evenly over the list, smallest and largest
    included (vllm_ascend/platform.py _prune_capture_sizes_for_950, in the piecewise branch
    of its compile-backend setup, on A5 only); the reason is empty when nothing goes."""
    if len(sizes) <= A5_MAX_CAPTURE_SIZES:
        return sizes, ""
    step = (len(sizes) - 1) / (A5_MAX_CAPTURE_SIZES - 1)
    picked = [round(i * step) for i in range(A5_MAX_CAPTURE_SIZES)]
    picked[0], picked[-1] = 0, len(sizes) - 1
    kept = tuple(sizes[i] for i in picked)
    reason = (
        f"the Atlas A5 driver captures at most {A5_MAX_CAPTURE_SIZES} piecewise graph sizes; "
        f"kept {len(kept)} of {len(sizes)}, spread from the smallest to the largest"
    )
    return kept, reason


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


def _no_capture(draft: Draft) -> Draft:
    """The host captures nothing: no capture sizes, whatever was given or left unset
    (vLLM fills unset sizes in for the graphs it would capture)."""
    sizes = draft.decisions.capture_sizes
    if sizes == ():
        return draft
    return draft.change(fields.CAPTURE_SIZES, sizes, (), HOST_GRAPHS_REASON).decide(
        capture_sizes=()
    )


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


def _fit_capture_sizes(
    tp: int, sequence_parallel: bool, sizes: tuple[int, ...]
) -> tuple[tuple[int, ...], list[str]]:
    """With sequence parallelism, every captured batch must split evenly over the TP ranks;
    the sizes that do, and why others went (nothing when all fit)."""
    if not sequence_parallel or tp == 1:
        return sizes, []
    kept = tuple(s for s in sizes if s % tp == 0)
    if kept == sizes:
        return sizes, []
    if kept:
        return kept, [
            f"sequence parallelism splits each captured batch over tensor_parallel_size={tp} "
            f"ranks; dropped {[s for s in sizes if s % tp]}"
        ]
    # None divisible: round up rather than lose graphs altogether.
    return tuple(sorted({-(-s // tp) * tp for s in sizes})), [
        f"sequence parallelism splits each captured batch over tensor_parallel_size={tp} "
        "ranks and no size was divisible; rounded each up to a multiple"
    ]
