"""The gated delta rule ops of torch_npu 2.14.0, written from the wheel's op docs.

npu_chunk_gated_delta_rule (prefill) and npu_recurrent_gated_delta_rule (decode): per
value head, token by token, alpha = exp(g): S <- alpha S; S <- S + beta (v - S k) k^T;
o = scale S q, with S [Dv, Dk] (the docs' state layout [BlockNum, Nv, Dv, Dk]) and value
head h reading key head h // (Nv / Nk). Computed in float32 here, in the recurrent form
(the definition), independent of adapters/torch/linear_attention.py's chunked form; bf16 out.

Documented limits checked (ValueError): bf16 query/key/value/beta/state, float32 g, int32
lengths and indices; the chunk op's Dk = Dv = 128, Nk, Nv <= 64, Nv a multiple of Nk;
the recurrent op's Dk, Dv, Nk, Nv <= 256 and L_i <= 8. The chunk op's docs also list
L_i <= 8, which their own example (100-token sequences) contradicts: a prefill op
limited to 8 tokens would not be a prefill op, so it is not enforced (a reading to
confirm on hardware). The chunk op takes no state indices: its initial_state is read as
one state per sequence, [B, Nv, Dv, Dk], and the final states come back as the second
output. Speculative inputs (num_accepted_tokens, gk, sequences of more than one token
in the recurrent op) are not modelled (NotImplementedError).
"""

from __future__ import annotations

from typing import Any

import torch

from support.torch_npu_emulator.semantics import F32, _require

BF = torch.bfloat16


def _step(
    state: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    g: torch.Tensor, beta: torch.Tensor, scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token, all heads: state [Nv, Dv, Dk] f32, q/k [Nv, Dk], v [Nv, Dv], g/beta [Nv]."""
    state = state * g.exp()[:, None, None]
    delta = (v - torch.einsum("hvk,hk->hv", state, k)) * beta[:, None]
    state = state + delta[:, :, None] * k[:, None, :]
    return state, torch.einsum("hvk,hk->hv", state, q) * scale


def _heads(a: dict[str, Any], op: str) -> tuple[torch.Tensor, ...]:
    q, k, v, beta, g = a["query"], a["key"], a["value"], a["beta"], a["g"]
    for name, t in (("query", q), ("key", k), ("value", v), ("beta", beta)):
        _require(t is not None and t.dtype == BF, f"{op}: {name} must be bfloat16")
    _require(g is not None and g.dtype == F32, f"{op}: g must be float32 (None is not modelled)")
    _require(q.dim() == 3 and k.shape == q.shape, f"{op}: query/key must be (T, Nk, Dk)")
    _require(v.dim() == 3 and v.shape[0] == q.shape[0], f"{op}: value must be (T, Nv, Dv)")
    _require(v.shape[1] % q.shape[1] == 0, f"{op}: Nv must be a multiple of Nk")
    _require(tuple(beta.shape) == tuple(v.shape[:2]), f"{op}: beta must be (T, Nv)")
    _require(tuple(g.shape) == tuple(v.shape[:2]), f"{op}: g must be (T, Nv)")
    groups = v.shape[1] // q.shape[1]
    qf, kf = (x.to(F32).repeat_interleave(groups, dim=1) for x in (q, k))
    return qf, kf, v.to(F32), g, beta.to(F32)


def _lengths(a: dict[str, Any], op: str, tokens: int) -> list[int]:
    lens = a["actual_seq_lengths"]
    _require(lens is not None and lens.dtype == torch.int32, f"{op}: actual_seq_lengths int32")
    values = [int(x) for x in lens.tolist()]
    _require(sum(values) == tokens, f"{op}: actual_seq_lengths must sum to T")
    return values


def npu_chunk_gated_delta_rule(a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    op = "npu_chunk_gated_delta_rule"
    q, k, v, g, beta = _heads(a, op)
    _require(q.shape[-1] == 128 and v.shape[-1] == 128, f"{op}: Dk and Dv must be 128")
    _require(a["query"].shape[1] <= 64 and v.shape[1] <= 64, f"{op}: Nk, Nv must be <= 64")
    _require(a["scale"] is not None, f"{op}: scale is required")
    lens = _lengths(a, op, q.shape[0])
    init = a["initial_state"]
    _require(init is not None and init.dtype == BF, f"{op}: initial_state must be bfloat16")
    _require(
        tuple(init.shape) == (len(lens), v.shape[1], v.shape[2], q.shape[2]),
        f"{op}: initial_state must be (B, Nv, Dv, Dk)",
    )
    out = torch.empty(v.shape, dtype=F32, device=v.device)
    final = torch.empty(init.shape, dtype=F32, device=v.device)
    start = 0
    for b, n in enumerate(lens):
        state = init[b].to(F32)
        for t in range(start, start + n):
            state, out[t] = _step(state, q[t], k[t], v[t], g[t], beta[t], a["scale"])
        final[b] = state
        start += n
    return out.to(BF), final.to(BF)


def npu_recurrent_gated_delta_rule(a: dict[str, Any]) -> torch.Tensor:
    op = "npu_recurrent_gated_delta_rule"
    q, k, v, g, beta = _heads(a, op)
    _require(max(q.shape[-1], v.shape[-1]) <= 256, f"{op}: Dk and Dv must be <= 256")
    _require(max(a["query"].shape[1], v.shape[1]) <= 256, f"{op}: Nk, Nv must be <= 256")
    _require(a["scale"] is not None, f"{op}: scale is required")
    for name in ("num_accepted_tokens", "gk"):
        if a[name] is not None:
            raise NotImplementedError(f"{op}: {name} is not modelled")
    lens = _lengths(a, op, q.shape[0])
    _require(max(lens, default=0) <= 8, f"{op}: sequences must be at most 8 tokens")
    if any(n != 1 for n in lens):
        raise NotImplementedError(f"{op}: sequences of more than one token are not modelled")
    state, idx = a["state"], a["ssm_state_indices"]
    _require(state.dtype == BF, f"{op}: state must be bfloat16")
    _require(idx is not None and idx.dtype == torch.int32, f"{op}: ssm_state_indices int32")
    _require(tuple(idx.shape) == (q.shape[0],), f"{op}: ssm_state_indices must be (T,)")
    _require(
        tuple(state.shape[1:]) == (v.shape[1], v.shape[2], q.shape[2]),
        f"{op}: state must be (BlockNum, Nv, Dv, Dk)",
    )
    out = torch.empty(v.shape, dtype=F32, device=v.device)
    for t, slot in enumerate(idx.tolist()):
        _require(0 <= slot < state.shape[0], f"{op}: ssm_state_indices out of range")
        s, out[t] = _step(state[slot].to(F32), q[t], k[t], v[t], g[t], beta[t], a["scale"])
        state[slot] = s.to(BF)
    return out.to(BF)


IMPLEMENTED = {
    "npu_chunk_gated_delta_rule": npu_chunk_gated_delta_rule,
    "npu_recurrent_gated_delta_rule": npu_recurrent_gated_delta_rule,
}
