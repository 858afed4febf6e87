"""The MoE role in plain torch on the host: the reference every device's MoE ops match.

Vectorised over tokens: routing is a few tensor ops, permutation one stable sort, the
experts one matmul pair per active expert, the combine one index_copy and k - 1 adds.
`experts` (the three steps in one call, as the vLLM adapter's unquantized MoE runs them)
takes the native kernel where it is built: the same roundings in one pass, tens of times
faster at decode than the loop's matmul calls.
"""

from __future__ import annotations

import torch

from adapters.cpu import native
from adapters.cpu.ops import swiglu
from ports.moe import SILU_MLP, ExpertMlp, GateKind, MoeOps, Permutation, Routing, Scoring

_F32 = torch.float32


class CpuMoeOps(MoeOps):
    """Stateless; every result is a new tensor.

    `native_kernels`: routing and experts through the native ops where they build (False:
    always the torch steps, the reference the native ops are checked against).
    """

    def __init__(self, native_kernels: bool = True) -> None:
        self._native_kernels = native_kernels

    def route(
        self,
        router_logits: torch.Tensor,
        routing: Routing,
        correction_bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores in float32, as the models compute them (HF and vLLM alike).

        Plain top-k (no groups, no bias) goes to the native op where it is built: torch's
        softmax steps and top-k loop (or its ops) in one call, so the same bits (moe_route.cpp).
        """
        plain = not routing.grouped and correction_bias is None and router_logits.dim() == 2
        if plain and self._native_kernels:
            kernel = native.moe_route()
            if kernel is not None:
                return kernel(
                    router_logits,
                    routing.top_k,
                    routing.scoring is Scoring.SIGMOID,
                    routing.renormalize,
                    routing.routed_scaling_factor,
                )
        return self._route(router_logits, routing, correction_bias)

    def _route(
        self,
        router_logits: torch.Tensor,
        routing: Routing,
        correction_bias: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The routing in torch ops, every rule."""
        logits = router_logits.to(_F32)
        softmax = routing.scoring is Scoring.SOFTMAX
        scores = logits.softmax(dim=-1) if softmax else logits.sigmoid()
        choice = scores if correction_bias is None else scores + correction_bias.to(_F32)
        if routing.grouped:
            choice = _keep_best_groups(choice, routing, biased=correction_bias is not None)
        ids = choice.topk(routing.top_k, dim=-1).indices
        weights = scores.gather(1, ids)
        if routing.renormalize:
            # The epsilon of DeepSeek's reference keeps an all-zero sigmoid row finite.
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        if routing.routed_scaling_factor != 1.0:
            weights = weights * routing.routed_scaling_factor
        return weights, ids.to(torch.int32)

    def permute(
        self, hidden: torch.Tensor, local_ids: torch.Tensor, num_local_experts: int
    ) -> tuple[torch.Tensor, Permutation]:
        num_tokens, top_k = local_ids.shape
        flat = local_ids.reshape(-1).long()
        valid = flat >= 0
        # Slots of other ranks' experts sort last (key E_local) and are cut off.
        key = torch.where(valid, flat, num_local_experts)
        order = torch.sort(key, stable=True).indices
        group_sizes = torch.bincount(flat[valid], minlength=num_local_experts)
        source_rows = order[: int(group_sizes.sum())]
        rows = hidden.index_select(0, torch.div(source_rows, top_k, rounding_mode="floor"))
        return rows, Permutation(source_rows, group_sizes, num_tokens, top_k)

    def grouped_mlp(
        self,
        rows: torch.Tensor,
        group_sizes: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        *,
        mlp: ExpertMlp = SILU_MLP,
        biases: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """One gate/up matmul and one down matmul per expert that received rows."""
        _check_biases(mlp, biases)
        out = torch.empty(rows.shape[0], w2.shape[1], dtype=rows.dtype)
        start = 0
        for expert, count in enumerate(group_sizes.tolist()):
            if count == 0:
                continue
            x = rows[start : start + count]
            gate_up = x @ w13[expert].t()
            if biases is not None:
                gate_up = gate_up + biases[0][expert].to(gate_up.dtype)
            act = _activate(gate_up, mlp)
            rows_out = out[start : start + count]
            torch.matmul(act, w2[expert].t(), out=rows_out)
            if biases is not None:
                rows_out.add_(biases[1][expert].to(rows_out.dtype))
            start += count
        return out

    def experts(
        self,
        hidden: torch.Tensor,
        local_ids: torch.Tensor,
        weights: torch.Tensor,
        w13: torch.Tensor,
        w2: torch.Tensor,
        *,
        mlp: ExpertMlp = SILU_MLP,
        biases: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """The native kernel (moe_experts.cpp) where it applies, else the three steps
        (always for another gate or biases: the kernel computes silu without biases).

        Its roundings are the steps': the gate/up, swiglu, down and combine outputs each
        rounded once, the weights to the rows' dtype first; its GEMMs sum in its own order
        (bf16 measured bit for bit the loop's, float32 within a rounding step).
        """
        plain = mlp == SILU_MLP and biases is None
        kernel = native.moe_experts() if self._native_kernels and plain else None
        if kernel is not None and native.moe_experts_takes(hidden, local_ids, weights, w13, w2):
            return kernel(hidden, local_ids, weights, w13, w2)
        return super().experts(hidden, local_ids, weights, w13, w2, mlp=mlp, biases=biases)

    def traces_in_graph(self, w13: torch.Tensor, w2: torch.Tensor) -> bool:
        """Where the native experts take the weights: route is torch ops or the native
        route, and the experts one native op, all with shape functions. The three steps'
        loop reads the group sizes back (a graph break), so other weights stay opaque.
        Called at load, so the native build is made then, not inside a graph's tracing."""
        if not self._native_kernels or native.moe_experts() is None:
            return False
        return native.moe_experts_take_weights(w13, w2)

    def unpermute(
        self, rows: torch.Tensor, permutation: Permutation, weights: torch.Tensor
    ) -> torch.Tensor:
        """Weighted rows summed per token in float32, rounded once to the rows' dtype.

        The NPU combine's contract (npu_moe_token_unpermute; CANN's kernel source): the
        weights rounded to the rows' dtype (the op takes bf16 probs, as Hugging Face's MoE
        blocks round theirs to the hidden dtype), float32 products, and each token's k
        slots summed in slot order. Slots left out by permute stay zero.
        """
        num_tokens, top_k = permutation.num_tokens, permutation.top_k
        w = weights.to(rows.dtype).reshape(-1).to(_F32)
        by_slot = torch.zeros(num_tokens * top_k, rows.shape[1], dtype=_F32)
        idx = permutation.source_rows
        by_slot.index_copy_(0, idx, rows.to(_F32) * w.index_select(0, idx)[:, None])
        slots = by_slot.view(num_tokens, top_k, rows.shape[1])
        out = slots[:, 0]
        for j in range(1, top_k):
            out = out + slots[:, j]
        return out.to(rows.dtype)


def _keep_best_groups(choice: torch.Tensor, routing: Routing, biased: bool) -> torch.Tensor:
    """Scores of experts outside the topk_group best groups set to -inf."""
    assert routing.num_expert_group is not None and routing.topk_group is not None
    num_tokens, num_experts = choice.shape
    groups = routing.num_expert_group
    grouped = choice.view(num_tokens, groups, num_experts // groups)
    if biased:
        group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
    else:
        group_scores = grouped.max(dim=-1).values
    best = group_scores.topk(routing.topk_group, dim=-1).indices
    keep = torch.zeros(num_tokens, groups, dtype=torch.bool).scatter_(1, best, True)
    keep = keep.repeat_interleave(num_experts // groups, dim=1)
    return choice.masked_fill(~keep, float("-inf"))


def swiglu_oai(gate_up: torch.Tensor, mlp: ExpertMlp) -> torch.Tensor:
    """gpt-oss's gate over interleaved gate/up columns, in float32, rounded once
    (transformers' GptOssExperts and vLLM's swigluoai_and_mul formula)."""
    x = gate_up.to(_F32)
    gate = x[..., ::2].clamp(max=mlp.limit)
    up = x[..., 1::2].clamp(min=-mlp.limit, max=mlp.limit)
    return ((up + 1) * (gate * torch.sigmoid(gate * mlp.alpha))).to(gate_up.dtype)


def silu_clamped(gate_up: torch.Tensor, limit: float) -> torch.Tensor:
    """DeepSeek-V4's gate over gate-first halves: silu(min(gate, limit)) * clamp(up,
    -limit, limit), in float32, rounded once."""
    gate, up = gate_up.to(_F32).chunk(2, dim=-1)
    gate = gate.clamp(max=limit)
    up = up.clamp(min=-limit, max=limit)
    return (torch.nn.functional.silu(gate) * up).to(gate_up.dtype)


def _activate(gate_up: torch.Tensor, mlp: ExpertMlp) -> torch.Tensor:
    if mlp.gate is GateKind.SILU:
        return swiglu(gate_up)
    if mlp.gate is GateKind.SILU_CLAMPED:
        return silu_clamped(gate_up, mlp.limit)
    return swiglu_oai(gate_up, mlp)


def _check_biases(mlp: ExpertMlp, biases: tuple[torch.Tensor, torch.Tensor] | None) -> None:
    if mlp.biased != (biases is not None):
        raise ValueError(
            f"grouped_mlp: ExpertMlp.biased={mlp.biased} but biases "
            f"{'were' if biases is not None else 'were not'} given; pass (b13, b2) exactly "
            "when the layer's experts have biases."
        )
