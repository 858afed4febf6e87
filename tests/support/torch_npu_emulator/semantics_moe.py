"""What the emulated torch_npu MoE ops compute, written from the 2.14.0 wheel's op docs.

Independent of adapters.cpu.moe. Documented limits the adapter relies on raise
ValueError; modes the docs leave undefined or we do not model raise NotImplementedError.
Each kernel runs on its inputs' device (the emulated `npu` one in the serving runs): the
tensors it makes without a device are made there (support.torch_npu_emulator.EmulatedOp).

Precision: the wheel's docs state dtypes, not intermediate precision. Where CANN's
published kernel source or aclnn docs state it, it is followed and named below; elsewhere
the emulator computes in float32 and rounds once, to the output dtype, at the op's end.
"""

from __future__ import annotations

from typing import Any

import torch

from support.torch_npu_emulator.semantics import F32, FLOAT_TYPES, _require
from support.torch_npu_emulator.semantics_w4a16 import antiquant_groups, unpack_int4pack


def npu_moe_gating_top_k(a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """norm (sigmoid) -> + bias for selection -> best k_group groups -> top-k;
    y = the chosen norm scores / (their sum + eps) * routed_scaling_factor."""
    x, k, bias = a["x"], a["k"], a["bias"]
    groups, k_group, mode = a["group_count"], a["k_group"], a["group_select_mode"]
    for name in ("input_ids", "tid2eid"):
        if a[name] is not None:
            raise NotImplementedError(f"npu_moe_gating_top_k: {name} (hash routing) not modelled")
    if a["norm_type"] != 1:
        raise NotImplementedError("npu_moe_gating_top_k: softmax norm_type is not modelled")
    _require(a["renorm"] == 0, "npu_moe_gating_top_k: renorm supports 0 only")
    _require(x.dim() == 2 and x.dtype in FLOAT_TYPES, "npu_moe_gating_top_k: x is 2D float")
    num_tokens, experts = x.shape
    _require(experts <= 2048, "npu_moe_gating_top_k: at most 2048 experts")
    _require(groups > 0 and experts % groups == 0, "npu_moe_gating_top_k: equal groups")
    per_group = experts // groups
    _require(per_group > 2, "npu_moe_gating_top_k: more than 2 experts per group")
    _require(-(-per_group // 32) * 32 * groups <= 2048, "npu_moe_gating_top_k: 32-aligned groups")
    _require(1 <= k_group <= groups, "npu_moe_gating_top_k: 1 <= k_group <= group_count")
    _require(1 <= k <= per_group * k_group, "npu_moe_gating_top_k: k <= E / groups * k_group")
    _require(mode in (0, 1), "npu_moe_gating_top_k: group_select_mode is 0 or 1")
    if bias is not None:
        _require(bias.dim() == 1 and bias.shape[0] == experts, "npu_moe_gating_top_k: bias [E]")
        _require(bias.dtype == x.dtype, "npu_moe_gating_top_k: bias dtype must be x's")
    norm = torch.sigmoid(x.to(F32))
    choice = norm if bias is None else norm + bias.to(F32)
    grouped = choice.view(num_tokens, groups, per_group)
    score = grouped.topk(2, dim=-1).values.sum(-1) if mode == 1 else grouped.max(-1).values
    best = score.topk(k_group, dim=-1).indices
    allowed = torch.zeros(num_tokens, groups, dtype=torch.bool).scatter_(1, best, True)
    choice = choice.masked_fill(~allowed.repeat_interleave(per_group, dim=1), float("-inf"))
    idx = choice.topk(k, dim=-1).indices
    y = norm.gather(1, idx)
    y = y / (y.sum(-1, keepdim=True) + a["eps"]) * a["routed_scaling_factor"]
    return y.to(x.dtype), idx.to(torch.int32), norm


def npu_moe_gating_top_k_softmax(
    a: dict[str, Any],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """softmax over the last dim, then its top-k values and indices; row_idx[t, j] = j*T + t."""
    x, k = a["x"], a["k"]
    if a["finished"] is not None:
        raise NotImplementedError("npu_moe_gating_top_k_softmax: finished is not modelled")
    _require(x.dim() == 2 and x.dtype in FLOAT_TYPES, "gating_top_k_softmax: x is 2D float")
    _require(0 < k <= x.shape[-1] and k <= 1024, "gating_top_k_softmax: 0 < k <= E, k <= 1024")
    values, idx = torch.softmax(x.to(F32), dim=-1).topk(k, dim=-1)
    tokens = x.shape[0]
    row_idx = torch.arange(k).unsqueeze(0) * tokens + torch.arange(tokens).unsqueeze(1)
    return values.to(x.dtype), idx.to(torch.int32), row_idx.to(torch.int32)


def npu_moe_init_routing_v2(
    a: dict[str, Any],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """keyValueSort of (expert, flat row) pairs; rows of x gathered in that order.

    Rows whose expert is outside active_expert_range are left out (placed last; their
    content and, with row_idx_type 1, their index are undefined: NaN and -7 here).
    """
    x, expert_idx = a["x"], a["expert_idx"]
    _require(x.dim() == 2 and x.dtype in FLOAT_TYPES, "init_routing_v2: x is 2D float (no int8)")
    _require(expert_idx.dim() == 2 and expert_idx.shape[0] == x.shape[0], "expert_idx [rows, K]")
    _require(expert_idx.dtype == torch.int32, "init_routing_v2: expert_idx int32")
    for name in ("scale", "offset"):
        if a[name] is not None:
            raise NotImplementedError(f"init_routing_v2: {name} not modelled")
    _require(a["drop_pad_mode"] == 0, "init_routing_v2: drop_pad_mode supports 0 only")
    _require(a["quant_mode"] == -1, "init_routing_v2: only the unquantized mode is modelled")
    _require(a["expert_tokens_num_type"] == 1, "init_routing_v2: count mode (1) is modelled")
    _require(a["expert_tokens_num_flag"] is True, "init_routing_v2: expert_tokens_num_flag True")
    if a["active_num"] not in (-1, 0):
        raise NotImplementedError("init_routing_v2: active_num > 0 not modelled")
    experts = a["expert_num"]
    _require(0 < experts <= 10240, "init_routing_v2: 0 < expert_num <= 10240")
    flat = expert_idx.reshape(-1).long()
    _require(bool(((flat >= 0) & (flat < experts)).all()), "expert ids must be < expert_num")
    start, end = a["active_expert_range"] or [0, experts]
    _require(0 <= start < end <= experts, "active_expert_range within [0, expert_num]")
    k = expert_idx.shape[1]
    # keyValueSort of (expert, flat row): a stable sort by expert keeps rows in order.
    order = torch.sort(flat, stable=True).indices
    by_expert = flat.index_select(0, order)
    active = order[(by_expert >= start) & (by_expert < end)]
    n = active.shape[0]
    expanded = torch.full((flat.shape[0], x.shape[1]), float("nan"), dtype=x.dtype)
    expanded[:n] = x.index_select(0, torch.div(active, k, rounding_mode="floor"))
    if a["row_idx_type"] == 1:  # scatter index: row i came from flat (token, slot) active[i]
        row_idx = torch.full((flat.shape[0],), -7, dtype=torch.int32)
        row_idx[:n] = active.to(torch.int32)
    else:  # gather index: flat (token, slot) j went to row row_idx[j], -1 if left out
        row_idx = torch.full((flat.shape[0],), -1, dtype=torch.int32)
        row_idx[active] = torch.arange(n, dtype=torch.int32)
    counts = torch.bincount(flat, minlength=experts)[start:end]
    return expanded, row_idx, counts.to(torch.int64), torch.zeros(flat.shape[0], dtype=F32)


def npu_grouped_matmul(a: dict[str, Any]) -> list[torch.Tensor]:
    """One x [M, K], one weight [G, K, N], group sizes over M: y[rows of g] = x @ w[g]."""
    xs, ws, group_list = a["x"], a["weight"], a["group_list"]
    quantized = bool(xs) and xs[0].dtype == torch.int8
    a8w4 = quantized and len(ws) == 1 and ws[0].dtype == torch.int32
    antiquant = not quantized and a["antiquant_scale"] is not None  # W4A16 (weight-only)
    for name in (
        *(() if a8w4 else ("bias",)),
        *(() if quantized else ("scale", "per_token_scale")),
        "offset",
        *(() if antiquant else ("antiquant_scale", "antiquant_offset")),
        "activation_input",
    ):
        if a[name] is not None:
            raise NotImplementedError(f"npu_grouped_matmul: {name} not modelled")
    if len(xs) != 1 or len(ws) != 1:
        raise NotImplementedError("npu_grouped_matmul: only one x and one weight tensor")
    _require(a["split_item"] in (2, 3), "npu_grouped_matmul: one output needs split_item 2/3")
    _require(a["group_type"] == 0, "npu_grouped_matmul: groups over M (group_type 0)")
    _require(a["act_type"] in (0, None), "npu_grouped_matmul: act_type not modelled")
    x, w = xs[0], ws[0]
    if antiquant:
        _require(w.dtype == torch.int32, "npu_grouped_matmul: only int4 (int32-carried) "
                 "antiquant weights are modelled")
    if a8w4 or antiquant:  # int4 weights, eight per int32 along N
        _require(w.dim() == 3 and w.is_contiguous(), "npu_grouped_matmul: int4 weight [G,K,N/8]")
        w = torch.stack([unpack_int4pack(g) for g in w])
    _require(x.dim() == 2 and w.dim() == 3 and x.shape[1] == w.shape[1], "x [M,K], w [G,K,N]")
    if not quantized and not antiquant:
        _require(x.dtype == w.dtype and x.dtype in FLOAT_TYPES, "npu_grouped_matmul: x, w dtypes")
    _require(x.shape[1] < 65536 and w.shape[2] < 65536, "npu_grouped_matmul: inner dims < 65536")
    _require(
        isinstance(group_list, torch.Tensor) and group_list.dtype == torch.int64,
        "npu_grouped_matmul: group_list is an int64 tensor",
    )
    _require(group_list.dim() == 1 and group_list.shape[0] == w.shape[0], "group_list [G]")
    sizes = group_list.tolist()
    if a["group_list_type"] == 1:
        _require(all(s >= 0 for s in sizes) and len(sizes) != 1, "group sizes: non-negative")
    else:
        _require(a["group_list_type"] == 0, "group_list_type is 0 or 1")
        _require(sizes == sorted(sizes) and sizes[0] >= 0, "cumulative group_list")
        sizes = [b - c for b, c in zip(sizes, [0, *sizes[:-1]], strict=True)]
    # Rows past the groups' sum are not computed; their output is undefined (NaN here).
    # The docs show group sizes that cover x; vllm-project/vllm-ascend's all-gather MoE
    # path hands the op all NUM_ROWS*K rows of npu_moe_init_routing_v2 with the counts of
    # the active experts only (expert parallel), which this follows.
    _require(sum(sizes) <= x.shape[0], "npu_grouped_matmul: group sizes exceed x's rows")
    if a8w4:
        return [_a8w4_groups(a, x, w, sizes)]
    if antiquant:
        return [antiquant_groups(a, x, w, sizes)]
    if quantized:
        return [_per_token_quant_groups(a, x, w, sizes)]
    # Each group's product accumulates in float32 and rounds once to x's dtype: torch's
    # CPU matmul does exactly that in bf16/fp16 (so it computes it here), as a cube unit
    # does; the docs state neither the precision nor the order of the sums.
    out = torch.full((x.shape[0], w.shape[2]), float("nan"), dtype=x.dtype)
    start = 0
    for g, size in enumerate(sizes):
        torch.matmul(x[start : start + size], w[g], out=out[start : start + size])
        start += size
    return [out]


def _per_token_quant_groups(
    a: dict[str, Any], x: torch.Tensor, w: torch.Tensor, sizes: list[int]
) -> torch.Tensor:
    """The docs' per-token quantization case (group_list a tensor): int8 x and weight,
    scale [G, N] float32/bfloat16, per_token_scale [M] float32, output bf16/fp16:
    y = (float32(x @ w[g]) * scale[g]) * per_token_scale, rounded once to output_dtype.
    The docs give the scale of a single weight tensor as 1-D per tensor; [G, N] is how
    vllm-project/vllm-ascend passes it (one row per expert), taken here as the layout."""
    scales, tokens, out_dtype = a["scale"], a["per_token_scale"], a["output_dtype"]
    _require(w.dtype == torch.int8, "npu_grouped_matmul: int8 x needs an int8 weight")
    _require(scales is not None and len(scales) == 1 and tokens is not None and len(tokens) == 1,
             "npu_grouped_matmul: per-token quantization takes one scale and per_token_scale")
    scale, token = scales[0], tokens[0]
    groups, _, n = w.shape
    _require(tuple(scale.shape) == (groups, n) and scale.dtype in (F32, torch.bfloat16),
             "npu_grouped_matmul: scale [G, N] float32/bfloat16")
    _require(tuple(token.shape) == (x.shape[0],) and token.dtype == F32,
             "npu_grouped_matmul: per_token_scale [M] float32")
    _require(out_dtype in (torch.bfloat16, torch.float16),
             f"npu_grouped_matmul: per-token quantization outputs bf16/fp16, not {out_dtype}")
    out = torch.full((x.shape[0], n), float("nan"), dtype=F32, device=x.device)
    start = 0
    for g, size in enumerate(sizes):
        acc = x[start : start + size].to(torch.int64) @ w[g].to(torch.int64)
        _require(bool((acc.abs() < 2**31).all()), "npu_grouped_matmul: int32 overflow")
        out[start : start + size] = acc.to(torch.int32).to(F32) * scale[g].to(F32)
        start += size
    return (out * token.unsqueeze(-1)).to(out_dtype)


def _a8w4_groups(
    a: dict[str, Any], x: torch.Tensor, w: torch.Tensor, sizes: list[int]
) -> torch.Tensor:
    """int8 x, int4 weights (A8W4). The operands as npu_grouped_matmul_finalize_routing's
    docs give them for a8w4 (the grouped matmul's own docs list int4 weights but not this
    case): scale int64 [G, 1, N] holding float32 bits, bias float32 2-D [G, N] (a8w4 only),
    per_token_scale float32 [M], output bfloat16. The docs state no formula for the bias;
    vllm-project/vllm-ascend passes 8 * scale * sum_k w as it (scale_bias) and its outputs
    are the model's, which fits a kernel that offsets each int8 activation by 8 into two
    int4 halves: modelled as y = (float32(x @ w - 8 * sum_k w) * scale + bias) *
    per_token_scale, so a missing or wrong bias gives wrong outputs, as it would there."""
    name = "npu_grouped_matmul (A8W4)"
    scales, tokens, biases = a["scale"], a["per_token_scale"], a["bias"]
    _require(scales is not None and len(scales) == 1 and tokens is not None and len(tokens) == 1
             and biases is not None and len(biases) == 1,
             f"{name}: takes one scale, one per_token_scale and one bias")
    scale, token, bias = scales[0], tokens[0], biases[0]
    groups, _, n = w.shape
    _require(tuple(scale.shape) == (groups, 1, n) and scale.dtype == torch.int64,
             f"{name}: scale int64 [G, 1, N]")
    _require(tuple(bias.shape) == (groups, n) and bias.dtype == F32,
             f"{name}: bias float32 [G, N]")
    _require(tuple(token.shape) == (x.shape[0],) and token.dtype == F32,
             f"{name}: per_token_scale [M] float32")
    _require(a["output_dtype"] == torch.bfloat16,
             f"{name}: outputs bfloat16, not {a['output_dtype']}")
    scale32 = (scale.reshape(groups, n) & 0xFFFFFFFF).to(torch.int32).view(F32)
    out = torch.full((x.shape[0], n), float("nan"), dtype=F32, device=x.device)
    start = 0
    for g, size in enumerate(sizes):
        wg = w[g].to(torch.int64)
        acc = x[start : start + size].to(torch.int64) @ wg - 8 * wg.sum(dim=0)
        _require(bool((acc.abs() < 2**31).all()), f"{name}: int32 overflow")
        out[start : start + size] = acc.to(F32) * scale32[g] + bias[g]
        start += size
    return (out * token.unsqueeze(-1)).to(torch.bfloat16)


def npu_moe_token_unpermute(a: dict[str, Any]) -> torch.Tensor:
    """out[t] = sum over j of probs[t, j] * permuted[sorted_indices[t * k + j]]: a gather.

    The wheel's doc: "get the data of permuted_tokens at the indices sorted_indices holds,
    multiply by probs, sum". CANN's aclnnMoeTokenUnpermute doc writes it T[k] = T[S[k]],
    T[k] *= P[i][j], O[i] = sum of T[k] over k in [i*topK, (i+1)*topK); its kernel
    (ops-transformer moe_token_unpermute.h) casts rows and probs to float32, sums the
    slots in order j = 0..k-1 in float32 and rounds once (RINT) to bf16. That precision
    is modelled here. The kernel also skips a slot whose prob is 0, which adds nothing.
    """
    permuted, indices, probs = a["permuted_tokens"], a["sorted_indices"], a["probs"]
    _require(not a["padded_mode"], "npu_moe_token_unpermute: padded_mode supports False only")
    _require(permuted.dtype == torch.bfloat16, "npu_moe_token_unpermute: permuted_tokens bf16")
    _require(indices.dtype in (torch.int32, torch.int64), "sorted_indices int32/int64")
    _require(indices.dim() == 1 and indices.shape[0] == permuted.shape[0], "one index per row")
    k = 1 if probs is None else probs.shape[1]
    if probs is not None:
        _require(probs.dtype == torch.bfloat16, "npu_moe_token_unpermute: probs bf16")
    tokens = permuted.shape[0] // k
    _require(tokens * k == permuted.shape[0], "rows must be num_tokens * topK")
    at = indices.long()
    _require(
        bool(((at >= 0) & (at < permuted.shape[0])).all()),
        "sorted_indices must be rows of permuted_tokens (>= 0)",
    )
    by_slot = permuted.index_select(0, at).to(F32).view(tokens, k, permuted.shape[1])
    if probs is not None:
        by_slot = by_slot * probs.to(F32).unsqueeze(-1)
    out = by_slot[:, 0]
    for j in range(1, k):
        out = out + by_slot[:, j]
    return out.to(permuted.dtype)


def npu_clipped_swiglu(a: dict[str, Any]) -> torch.Tensor:
    """The op docs' formula: A, B the even/odd (interleaved) or first/second halves of
    `dim`; A clamped above at limit, B to [-limit, limit]; A * sigmoid(alpha * A) *
    (B + bias), in float32, rounded once to x's dtype. group_index (rows kept) is not
    modelled."""
    x, dim = a["x"], a["dim"]
    if a["group_index"] is not None:
        raise NotImplementedError("npu_clipped_swiglu: group_index is not modelled")
    _require(x.dtype in FLOAT_TYPES, f"npu_clipped_swiglu: dtype {x.dtype} unsupported")
    _require(x.dim() > 1 and x.shape[dim] % 2 == 0, "npu_clipped_swiglu: dim must be even")
    _require(x.is_contiguous(), "npu_clipped_swiglu: x must be contiguous")
    xf = x.to(F32).movedim(dim, -1)
    if a["interleaved"]:
        first, second = xf[..., ::2], xf[..., 1::2]
    else:
        first, second = xf.chunk(2, dim=-1)
    limit, alpha = a["limit"], a["alpha"]
    first = first.clamp(max=limit)
    second = second.clamp(min=-limit, max=limit)
    y = first * torch.sigmoid(alpha * first) * (second + a["bias"])
    return y.movedim(-1, dim).to(x.dtype)


IMPLEMENTED = {
    "npu_clipped_swiglu": npu_clipped_swiglu,
    "npu_moe_gating_top_k": npu_moe_gating_top_k,
    "npu_moe_gating_top_k_softmax": npu_moe_gating_top_k_softmax,
    "npu_moe_init_routing_v2": npu_moe_init_routing_v2,
    "npu_grouped_matmul": npu_grouped_matmul,
    "npu_moe_token_unpermute": npu_moe_token_unpermute,
}
