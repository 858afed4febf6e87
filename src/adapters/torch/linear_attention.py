"""The linear-attention port (gated delta net, Kimi delta attention) in plain torch, on any
device's tensors.

The host serves with it as it is; the NPU adapter takes the convolution from here (no
torch_npu op fits Qwen3-Next's width-4 convolution on A2/A3) and the delta rule from
torch_npu where the op's shapes allow. The arithmetic runs in float32 and is cast back.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ports.linear_attention import LinearAttentionOps, StateSequences

CHUNK = 64  # rows per chunk of the chunked delta rule


def _expand_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[T, Hk, D] -> [T, Hv, D]: value head h reads key head h // (Hv / Hk)."""
    groups = heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


class TorchLinearAttentionOps(LinearAttentionOps):
    """Reference implementations: the convolution as W shifted taps, the delta rule in
    its chunked (WY) form for prefills and its recurrent form for decodes; a gate per head
    (GDN) or per key channel (KDA) alike."""

    # -- convolution -------------------------------------------------------------------

    def causal_conv1d(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        conv_states: torch.Tensor,
        seqs: StateSequences,
    ) -> torch.Tensor:
        tokens = x.shape[0]
        width = weight.shape[1]
        if tokens == 0:
            return x
        qsl = seqs.query_start_loc.long()
        slots = seqs.state_indices.long()
        rows = torch.arange(tokens, device=x.device)
        seq = torch.searchsorted(qsl[1:], rows, right=True)
        pos = rows - qsl[seq]
        # A sequence without an initial state starts from zeros (where, not a product:
        # a fresh slot may hold anything, NaN included).
        states = torch.where(
            seqs.has_initial_state[:, None, None],
            conv_states.index_select(0, slots).to(torch.float32),
            0.0,
        )
        xf = x.to(torch.float32)
        out = torch.zeros_like(xf)
        for tap in range(width):
            src = pos + (tap - (width - 1))  # position in the sequence; < 0: the state
            from_x = xf.index_select(0, (rows + (tap - (width - 1))).clamp(min=0))
            from_state = states[seq, (src + (width - 1)).clamp(0, width - 2)]
            col = torch.where((src >= 0)[:, None], from_x, from_state)
            out += col * weight[:, tap].to(torch.float32)
        # Each slot keeps the last W-1 inputs of (its state, its sequence).
        lens = qsl[1:] - qsl[:-1]
        keep_pos = lens[:, None] - (width - 1) + torch.arange(width - 1, device=x.device)
        from_x = xf.index_select(0, (qsl[:-1, None] + keep_pos).clamp(min=0).reshape(-1))
        from_x = from_x.view(len(slots), width - 1, -1)
        from_state = torch.gather(
            states,
            1,
            (keep_pos + (width - 1)).clamp(min=0, max=width - 2)[:, :, None].expand_as(from_x),
        )
        new = torch.where((keep_pos >= 0)[:, :, None], from_x, from_state)
        conv_states.index_copy_(0, slots, new.to(conv_states.dtype))
        return F.silu(out).to(x.dtype)

    def causal_conv1d_update(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        conv_states: torch.Tensor,
        state_indices: torch.Tensor,
    ) -> torch.Tensor:
        slots = state_indices.long()
        window = torch.cat(
            (conv_states.index_select(0, slots).to(torch.float32), x.to(torch.float32)[:, None]),
            dim=1,
        )  # [B, W, D]
        out = torch.einsum("bwd,dw->bd", window, weight.to(torch.float32))
        conv_states.index_copy_(0, slots, window[:, 1:].to(conv_states.dtype))
        return F.silu(out).to(x.dtype)

    # -- delta rule --------------------------------------------------------------------

    def chunk_gated_delta_rule(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        ssm_states: torch.Tensor,
        seqs: StateSequences,
        scale: float,
    ) -> torch.Tensor:
        heads = v.shape[1]
        out = torch.empty_like(v)
        bounds = seqs.query_start_loc.tolist()  # the host's loop over sequences
        slots = seqs.state_indices.tolist()
        initial = seqs.has_initial_state.tolist()
        for b, slot in enumerate(slots):
            start, end = bounds[b], bounds[b + 1]
            if end == start:
                continue
            state = ssm_states[slot].to(torch.float32).transpose(-1, -2)  # [H, Dk, Dv]
            if not initial[b]:
                state = torch.zeros_like(state)
            chunked = _chunked if g.dim() == 2 else _chunked_per_channel
            o, final = chunked(
                _expand_heads(q[start:end], heads).to(torch.float32) * scale,
                _expand_heads(k[start:end], heads).to(torch.float32),
                v[start:end].to(torch.float32),
                g[start:end].to(torch.float32),
                beta[start:end].to(torch.float32),
                state,
            )
            out[start:end] = o.to(out.dtype)
            ssm_states[slot] = final.transpose(-1, -2).to(ssm_states.dtype)
        return out

    def recurrent_gated_delta_rule(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        ssm_states: torch.Tensor,
        state_indices: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        heads = v.shape[1]
        slots = state_indices.long()
        state = ssm_states.index_select(0, slots).to(torch.float32)  # [B, H, Dv, Dk]
        qf = _expand_heads(q, heads).to(torch.float32) * scale
        kf = _expand_heads(k, heads).to(torch.float32)
        decay = g.to(torch.float32).exp()
        # [B, H] scales each head's matrix; [B, H, Dk] each key channel (the state's last dim).
        state = state * (decay[..., None, None] if g.dim() == 2 else decay[..., None, :])
        predicted = (state @ kf[..., None])[..., 0]  # [B, H, Dv]
        delta = (v.to(torch.float32) - predicted) * beta.to(torch.float32)[..., None]
        state = state + delta[..., None] * kf[..., None, :]
        out = (state @ qf[..., None])[..., 0]
        ssm_states.index_copy_(0, slots, state.to(ssm_states.dtype))
        return out.to(v.dtype)


def _chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence, float32: q (scaled), k [L, H, Dk], v [L, H, Dv], g, beta [L, H],
    state [H, Dk, Dv]. Within a chunk the delta rule's updates are solved at once (the
    UT transform, a unit lower-triangular system); across chunks the state carries."""
    length = q.shape[0]
    pad = (-length) % CHUNK
    q, k, v = (F.pad(x.transpose(0, 1), (0, 0, 0, pad)) for x in (q, k, v))  # [H, L', D]
    g, beta = (F.pad(x.transpose(0, 1), (0, pad)) for x in (g, beta))  # [H, L']
    heads = q.shape[0]
    n = q.shape[1] // CHUNK
    q, k, v = (x.reshape(heads, n, CHUNK, -1) for x in (q, k, v))
    g, beta = (x.reshape(heads, n, CHUNK) for x in (g, beta))
    decay = g.cumsum(-1)  # [H, N, C]: log decay from the chunk's start to each row
    lower = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device).tril()
    pair = (decay[..., :, None] - decay[..., None, :]).masked_fill(~lower, float("-inf")).exp()
    k_beta = k * beta[..., None]
    system = (k_beta @ k.transpose(-1, -2)) * pair
    system = system.masked_fill(lower.logical_not() | torch.eye(
        CHUNK, dtype=torch.bool, device=q.device), 0.0)
    eye = torch.eye(CHUNK, dtype=q.dtype, device=q.device)
    u = torch.linalg.solve_triangular(system + eye, v * beta[..., None], upper=False)
    w = torch.linalg.solve_triangular(
        system + eye, k_beta * decay.exp()[..., None], upper=False
    )
    attn = (q @ k.transpose(-1, -2)) * pair
    q_decayed = q * decay.exp()[..., None]
    last = decay[..., -1:]  # [H, N, 1]
    k_tail = k * (last - decay).exp()[..., None]
    out = torch.empty_like(v)
    for i in range(n):
        v_new = u[:, i] - w[:, i] @ state
        out[:, i] = q_decayed[:, i] @ state + attn[:, i] @ v_new
        state = state * last[:, i, :, None].exp() + k_tail[:, i].transpose(-1, -2) @ v_new
    out = out.reshape(heads, n * CHUNK, -1)[:, :length]
    return out.transpose(0, 1), state


def _chunked_per_channel(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """_chunked with a gate per key channel (KDA): g [L, H, Dk]. The decay between rows j <= i
    of a chunk is exp(G_i - G_j) per channel (G the chunk's cumulative log decay), so the
    pairwise products carry the channel: [H, C, C, Dk] per chunk, every exponent <= 0."""
    length = q.shape[0]
    out = torch.empty_like(v)
    lower = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device).tril()
    for start in range(0, length, CHUNK):
        end = min(start + CHUNK, length)
        c = end - start
        qc, kc, vc, gc = (x[start:end].transpose(0, 1) for x in (q, k, v, g))  # [H, c, D]
        bc = beta[start:end].transpose(0, 1)[..., None]  # [H, c, 1]
        decay = gc.cumsum(1)  # [H, c, Dk]
        below = lower[:c, :c]
        pair = (decay[:, :, None] - decay[:, None]).masked_fill(
            ~below[None, :, :, None], float("-inf")
        ).exp()  # [H, c(i), c(j), Dk]: exp(G_i - G_j) for j <= i, else 0
        k_beta = kc * bc
        system = torch.einsum("hid,hjd,hijd->hij", k_beta, kc, pair)
        system = system.masked_fill(below.logical_not() | torch.eye(
            c, dtype=torch.bool, device=q.device), 0.0)
        unit = system + torch.eye(c, dtype=q.dtype, device=q.device)
        u = torch.linalg.solve_triangular(unit, vc * bc, upper=False)
        w = torch.linalg.solve_triangular(unit, k_beta * decay.exp(), upper=False)
        attn = torch.einsum("hid,hjd,hijd->hij", qc, kc, pair)
        v_new = u - w @ state
        out[start:end] = ((qc * decay.exp()) @ state + attn @ v_new).transpose(0, 1)
        last = decay[:, -1:]  # [H, 1, Dk]
        k_tail = kc * (last - decay).exp()
        state = state * last.transpose(-1, -2).exp() + k_tail.transpose(-1, -2) @ v_new
    return out, state
