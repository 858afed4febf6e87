"""What a MoE layer's exchange does in the steps vLLM captures in NPU graphs.

A capture records the device's work and refuses reads back to the host. MC2's dispatch
and combine take fixed shapes (global_bs from the padded batch, a fixed receive capacity)
and read nothing back, so a captured step runs them inside the graph and every replay
exchanges again. The all-to-all and all-gather paths read their splits (the rows each rank
sends) on the host; a captured step that the plan gives one of them runs the experts each
rank holds on all its tokens instead, and vLLM's all-reduce after the layer adds the
ranks' partial sums (the same outputs, no exchange); eager steps keep the method.
"""

from __future__ import annotations

from ascend_core.moe.comm_method import MoeCommMethod, MoeCommPlan

# The methods a graph capture can record: nothing read back per MoE layer.
CAPTURED_METHODS = frozenset({MoeCommMethod.MC2})


def captures(method: MoeCommMethod) -> bool:
    """Whether a captured step may exchange by `method`."""
    return method in CAPTURED_METHODS


def in_graphs(comm: MoeCommPlan, captured_tokens: int) -> str:
    """In words, how the captured steps (up to `captured_tokens` tokens) exchange."""
    method = comm.for_tokens(captured_tokens).method
    steps = f"captured steps (up to {captured_tokens} tokens)"
    if captures(method):
        return (
            f"{steps} exchange by {method.value} inside the graphs: dispatch and combine "
            "take fixed shapes (global_bs from the padded batch) and read nothing back, so "
            "each replay exchanges again"
        )
    return (
        f"{steps} run each rank's experts on all its tokens and vLLM's all-reduce adds the "
        f"partial sums inside the graphs: {method.value} reads its splits on the host, "
        f"which a capture refuses; eager steps exchange by {method.value}"
    )
