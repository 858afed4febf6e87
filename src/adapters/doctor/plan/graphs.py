"""The `graphs` section: the graph mode the engine captures, its sizes and their memory."""

from __future__ import annotations

from typing import Any

from adapters.doctor.plan.batch import serve_max_num_batched_tokens, serve_max_num_seqs
from adapters.doctor.plan.config import engine_execution
from adapters.doctor.plan.items import PASS
from adapters.doctor.plan.model import Target
from adapters.doctor.serve_args import ServeArgs
from ascend_core.deployment import Deployment, GraphMode
from ascend_core.plan import ConfigPlan
from ascend_core.plan.capture_sizes import (
    default_capture_sizes,
    full_decode_sizes,
    given_capture_sizes,
)
from ascend_core.plan.npugraph_ex import npugraph_ex_note
from ascend_core.preflight import CheckItem

# The modes whose uniform decode steps vLLM captures whole.
FULL_DECODE_MODES = (GraphMode.FULL, GraphMode.FULL_DECODE_ONLY, GraphMode.FULL_AND_PIECEWISE)

GRAPH_MEMORY = (
    "measured by each worker at start, before the KV cache is sized (vLLM's capture "
    "profiling: a throwaway capture per graph kind in a pool of its own) and logged as "
    "'<mode> graphs are estimated to hold ...'; the KV budget leaves it free "
    "(--kv-cache-memory-bytes fixes the KV cache and the graphs come on top); this "
    "plan's memory budget counts it in the runtime reserve"
)


def capture_sizes(
    args: ServeArgs, plan: ConfigPlan, target: Target, mode: GraphMode | None = None
) -> tuple[int, ...]:
    """The sizes vLLM captures: the plan's (the operator's, perhaps changed) or vLLM's
    default for these batch limits; with speculative decoding and full decode graphs
    (`mode`), rounded to whole verify batches of 1 + k tokens a request, as vLLM does."""
    tokens = serve_max_num_batched_tokens(args, target.memory_bytes)
    decode_query_len = 1 + int(args.speculative.get("num_speculative_tokens") or 0)
    if plan.decisions.capture_sizes is not None:
        sizes = given_capture_sizes(plan.decisions.capture_sizes, tokens)
    else:
        seqs = serve_max_num_seqs(args, target.memory_bytes)
        sizes = default_capture_sizes(seqs, tokens, decode_query_len)
    if mode in FULL_DECODE_MODES:
        sizes = full_decode_sizes(sizes, decode_query_len)
    return sizes


def captured(mode: GraphMode, deployment: Deployment) -> str:
    """In words, what the graphs of `mode` hold for this model."""
    model = deployment.model
    attention = "the MLA latent decode" if model.use_mla else "the paged attention"
    moe = ", the MoE layers too (fixed-size routing, nothing read back)" if model.is_moe else ""
    spec = deployment.speculative
    step = (
        f"uniform verify step (1 + {spec.num_speculative_tokens} tokens a request)"
        if spec.method is not None
        else "uniform decode step"
    )
    whole = (
        f"each {step} one graph: {attention} inside, its plan in persistent "
        f"buffers and its host-side lengths given to NPUGraph.update at each replay{moe}"
    )
    if mode is GraphMode.FULL_DECODE_ONLY:
        drafter = " and the drafter's forwards" if spec.method is not None else ""
        return f"{whole}; other steps{drafter} run compiled without graphs"
    if mode is GraphMode.FULL_AND_PIECEWISE:
        return f"{whole}; other steps in pieces between the attention layers"
    moe_pieces = "; the MoE layers inside the pieces" if model.is_moe else ""
    return f"pieces between the attention layers, which run eagerly{moe_pieces}"


def graph_items(
    args: ServeArgs, deployment: Deployment, plan: ConfigPlan, target: Target
) -> tuple[list[CheckItem], dict[str, Any]]:
    """The mode the engine runs (engine_execution), the sizes it captures, where their
    memory is counted, and what enable_npugraph_ex does; with the same as report data."""
    mode, _ = engine_execution(plan, deployment.device_kind)
    sizes: tuple[int, ...] = ()
    if mode is not GraphMode.NONE:
        sizes = capture_sizes(args, plan, target, mode)
    shown = f"{list(sizes)} ({len(sizes)} sizes)"
    if mode in FULL_DECODE_MODES and args.speculative.get("num_speculative_tokens"):
        shown += (
            "; speculative decoding: whole verify batches of 1 + num_speculative_tokens "
            "tokens a request, as vLLM rounds them"
        )
    items = [CheckItem("mode", PASS, mode.name)]
    data: dict[str, Any] = {"mode": mode.name, "capture_sizes": []}
    if mode is not GraphMode.NONE:
        items += [
            CheckItem("captured", PASS, captured(mode, deployment)),
            CheckItem("capture sizes", PASS, shown),
            CheckItem("graph memory", PASS, GRAPH_MEMORY),
        ]
        data.update(
            captured=captured(mode, deployment),
            capture_sizes=list(sizes),
            graph_memory=GRAPH_MEMORY,
        )
    if plan.decisions.dp_graphs:  # an NPU under data parallelism: graphs kept or not
        items.append(CheckItem("data parallel", PASS, plan.decisions.dp_graphs))
        data["data_parallel"] = plan.decisions.dp_graphs
    if plan.decisions.encoder_execution:  # a model with a vision tower
        items.append(CheckItem("vision encoder", PASS, plan.decisions.encoder_execution))
        data["encoder"] = plan.decisions.encoder_execution
    note = npugraph_ex_note(deployment, plan)
    if note is not None:
        items.append(CheckItem("npugraph_ex", PASS, note))
        data["npugraph_ex"] = note
    return items, data
